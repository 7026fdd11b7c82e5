package client

import (
	"net/http"
	"time"

	"github.com/breakerd/breakerd/internal/webhook"
)

// The Standard Webhooks headers breakerd's alert hooks carry
// (https://www.standardwebhooks.com, spec v1).
const (
	// WebhookIDHeader carries the delivery's id: the same on every retry
	// of one event, so a receiver drops duplicates by it.
	WebhookIDHeader = webhook.IDHeader
	// WebhookTimestampHeader carries when the attempt was signed, in
	// seconds since the Unix epoch.
	WebhookTimestampHeader = webhook.TimestampHeader
	// WebhookSignatureHeader carries space-separated "v1,<base64>"
	// signatures: HMAC-SHA256 of "<id>.<timestamp>.<body>".
	WebhookSignatureHeader = webhook.SignatureHeader
)

// WebhookTolerance is how far a delivery's timestamp may be from the
// receiver's clock, either way, before VerifyWebhook refuses it as a
// replay (or a clock too far off): 5 minutes, the spec's suggestion.
const WebhookTolerance = webhook.Tolerance

// WebhookSecretPrefix starts a secret in the Standard Webhooks form:
// "whsec_" and the base64 (standard alphabet, padded) of the key bytes.
const WebhookSecretPrefix = webhook.SecretPrefix

// Errors of VerifyWebhook; match them with errors.Is.
var (
	// ErrWebhookHeaders: a webhook-* header is missing or malformed.
	ErrWebhookHeaders = webhook.ErrHeaders
	// ErrWebhookTimestamp: signed further than WebhookTolerance from now
	// (a replayed request, or a clock far off).
	ErrWebhookTimestamp = webhook.ErrTimestamp
	// ErrWebhookSignature: no v1 signature matches (a tampered body, id or
	// timestamp, or another secret).
	ErrWebhookSignature = webhook.ErrSignature
	// ErrWebhookSecret: the secret given to VerifyWebhook is empty (or
	// "whsec_" alone): a signature keyed by nothing proves nothing.
	ErrWebhookSecret = webhook.ErrSecret
)

// WebhookKey returns the HMAC key a hook secret stands for: the decoded
// bytes of a "whsec_<base64>" secret, or the bytes of any other string as
// given. It fails only on a whsec_ secret whose base64 does not decode.
func WebhookKey(secret string) ([]byte, error) { return webhook.Key(secret) }

// SignWebhook returns the webhook-signature value for one attempt:
// "v1," and the base64 HMAC-SHA256, keyed by key, of id, ".", the
// timestamp in Unix seconds, ".", and body.
func SignWebhook(key []byte, id string, timestamp time.Time, body []byte) string {
	return webhook.Sign(key, id, timestamp, body)
}

// VerifyWebhook checks one breakerd webhook delivery as a receiver: the
// headers h and the raw body exactly as received, the hook's secret (as
// in the daemon's hooks file: "whsec_…" or raw), and the receiver's
// clock now. It returns nil when a v1 signature matches (compared in
// constant time) and the timestamp is within WebhookTolerance of now;
// else ErrWebhookSecret (an empty secret), ErrWebhookHeaders,
// ErrWebhookTimestamp or ErrWebhookSignature
// (wrapped, so use errors.Is). A request captured and sent again later
// fails the timestamp check; within the tolerance, drop repeats by
// webhook-id. Only the standard library is used.
func VerifyWebhook(secret string, h http.Header, body []byte, now time.Time) error {
	return webhook.Verify(secret, h, body, now)
}
