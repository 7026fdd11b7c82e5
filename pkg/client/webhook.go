package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers breakerd's alert hooks carry
// (https://www.standardwebhooks.com, spec v1).
const (
	// WebhookIDHeader carries the delivery's id: the same on every retry
	// of one event, so a receiver drops duplicates by it.
	WebhookIDHeader = "webhook-id"
	// WebhookTimestampHeader carries when the attempt was signed, in
	// seconds since the Unix epoch.
	WebhookTimestampHeader = "webhook-timestamp"
	// WebhookSignatureHeader carries space-separated "v1,<base64>"
	// signatures: HMAC-SHA256 of "<id>.<timestamp>.<body>".
	WebhookSignatureHeader = "webhook-signature"
)

// WebhookTolerance is how far a delivery's timestamp may be from the
// receiver's clock, either way, before VerifyWebhook refuses it as a
// replay (or a clock too far off): 5 minutes, the spec's suggestion.
const WebhookTolerance = 5 * time.Minute

// WebhookSecretPrefix starts a secret in the Standard Webhooks form:
// "whsec_" and the base64 (standard alphabet, padded) of the key bytes.
const WebhookSecretPrefix = "whsec_"

// Errors of VerifyWebhook; match them with errors.Is.
var (
	// ErrWebhookHeaders: a webhook-* header is missing or malformed.
	ErrWebhookHeaders = errors.New("webhook: missing or malformed webhook-id, webhook-timestamp or webhook-signature")
	// ErrWebhookTimestamp: signed further than WebhookTolerance from now
	// (a replayed request, or a clock far off).
	ErrWebhookTimestamp = errors.New("webhook: timestamp outside the tolerance")
	// ErrWebhookSignature: no v1 signature matches (a tampered body, id or
	// timestamp, or another secret).
	ErrWebhookSignature = errors.New("webhook: no matching signature")
)

// WebhookKey returns the HMAC key a hook secret stands for: the decoded
// bytes of a "whsec_<base64>" secret, or the bytes of any other string as
// given. It fails only on a whsec_ secret whose base64 does not decode.
func WebhookKey(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, WebhookSecretPrefix)
	if !ok {
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("webhook: secret after %q is not base64: %w", WebhookSecretPrefix, err)
	}
	return key, nil
}

// SignWebhook returns the webhook-signature value for one attempt:
// "v1," and the base64 HMAC-SHA256, keyed by key, of id, ".", the
// timestamp in Unix seconds, ".", and body.
func SignWebhook(key []byte, id string, timestamp time.Time, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(timestamp.Unix(), 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// VerifyWebhook checks one breakerd webhook delivery as a receiver: the
// headers h and the raw body exactly as received, the hook's secret (as
// in the daemon's hooks file: "whsec_…" or raw), and the receiver's
// clock now. It returns nil when a v1 signature matches (compared in
// constant time) and the timestamp is within WebhookTolerance of now;
// else ErrWebhookHeaders, ErrWebhookTimestamp or ErrWebhookSignature
// (wrapped, so use errors.Is). A request captured and sent again later
// fails the timestamp check; within the tolerance, drop repeats by
// webhook-id. Only the standard library is used.
func VerifyWebhook(secret string, h http.Header, body []byte, now time.Time) error {
	key, err := WebhookKey(secret)
	if err != nil {
		return err
	}
	id, ts, sigs := h.Get(WebhookIDHeader), h.Get(WebhookTimestampHeader), h.Get(WebhookSignatureHeader)
	if id == "" || ts == "" || sigs == "" {
		return ErrWebhookHeaders
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: webhook-timestamp %q is not Unix seconds", ErrWebhookHeaders, ts)
	}
	at := time.Unix(sec, 0)
	if d := now.Sub(at); d > WebhookTolerance || d < -WebhookTolerance {
		return fmt.Errorf("%w: signed at %s, %s from now", ErrWebhookTimestamp, at.UTC().Format(time.RFC3339), d.Round(time.Second))
	}
	want := SignWebhook(key, id, at, body)
	for _, sig := range strings.Fields(sigs) {
		if strings.HasPrefix(sig, "v1,") && hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return ErrWebhookSignature
}
