// Package webhook signs and verifies breakerd's alert deliveries as the
// Standard Webhooks spec (https://www.standardwebhooks.com, v1) says, with
// the standard library only. The daemon's hook dispatcher signs with it;
// pkg/client exports its receiver side (client.Verify).
package webhook

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
	// IDHeader carries the delivery's id: the same on every retry
	// of one event, so a receiver drops duplicates by it.
	IDHeader = "webhook-id"
	// TimestampHeader carries when the attempt was signed, in
	// seconds since the Unix epoch.
	TimestampHeader = "webhook-timestamp"
	// SignatureHeader carries space-separated "v1,<base64>"
	// signatures: HMAC-SHA256 of "<id>.<timestamp>.<body>".
	SignatureHeader = "webhook-signature"
)

// Tolerance is how far a delivery's timestamp may be from the
// receiver's clock, either way, before Verify refuses it as a
// replay (or a clock too far off): 5 minutes, the spec's suggestion.
const Tolerance = 5 * time.Minute

// SecretPrefix starts a secret in the Standard Webhooks form:
// "whsec_" and the base64 (standard alphabet, padded) of the key bytes.
const SecretPrefix = "whsec_"

// Errors of Verify; match them with errors.Is.
var (
	// ErrHeaders: a webhook-* header is missing or malformed.
	ErrHeaders = errors.New("webhook: missing or malformed webhook-id, webhook-timestamp or webhook-signature")
	// ErrTimestamp: signed further than Tolerance from now
	// (a replayed request, or a clock far off).
	ErrTimestamp = errors.New("webhook: timestamp outside the tolerance")
	// ErrSignature: no v1 signature matches (a tampered body, id or
	// timestamp, or another secret).
	ErrSignature = errors.New("webhook: no matching signature")
	// ErrSecret: the receiver's secret is empty, so any sender could sign.
	ErrSecret = errors.New("webhook: the secret is empty")
)

// Key returns the HMAC key a hook secret stands for: the decoded
// bytes of a "whsec_<base64>" secret, or the bytes of any other string as
// given. It fails only on a whsec_ secret whose base64 does not decode.
func Key(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("webhook: secret after %q is not base64: %w", SecretPrefix, err)
	}
	return key, nil
}

// Sign returns the webhook-signature value for one attempt:
// "v1," and the base64 HMAC-SHA256, keyed by key, of id, ".", the
// timestamp in Unix seconds, ".", and body.
func Sign(key []byte, id string, timestamp time.Time, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(timestamp.Unix(), 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Verify checks one breakerd webhook delivery as a receiver: the
// headers h and the raw body exactly as received, the hook's secret (as
// in the daemon's hooks file: "whsec_…" or raw), and the receiver's
// clock now. It returns nil when a v1 signature matches (compared in
// constant time) and the timestamp is within Tolerance of now;
// else ErrSecret (an empty secret, or "whsec_" alone), ErrHeaders,
// ErrTimestamp or ErrSignature
// (wrapped, so use errors.Is). A request captured and sent again later
// fails the timestamp check; within the tolerance, drop repeats by
// webhook-id. Only the standard library is used.
func Verify(secret string, h http.Header, body []byte, now time.Time) error {
	key, err := Key(secret)
	if err != nil {
		return err
	}
	if len(key) == 0 {
		return ErrSecret // an empty key is one every sender holds
	}
	id, ts, sigs := h.Get(IDHeader), h.Get(TimestampHeader), h.Get(SignatureHeader)
	if id == "" || ts == "" || sigs == "" {
		return ErrHeaders
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: webhook-timestamp %q is not Unix seconds", ErrHeaders, ts)
	}
	at := time.Unix(sec, 0)
	if d := now.Sub(at); d > Tolerance || d < -Tolerance {
		return fmt.Errorf("%w: signed at %s, %s from now", ErrTimestamp, at.UTC().Format(time.RFC3339), d.Round(time.Second))
	}
	want := Sign(key, id, at, body)
	for _, sig := range strings.Fields(sigs) {
		if strings.HasPrefix(sig, "v1,") && hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return ErrSignature
}
