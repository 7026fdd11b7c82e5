package client_test

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/breakerd/breakerd/pkg/client"
)

// The Standard Webhooks specification's published test vector: what a
// receiver's own library (svix, standardwebhooks) computes.
const (
	specSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTimestamp = 1614265330
	specBody      = `{"test": 2432232314}`
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func specHeader(sig string) http.Header {
	h := http.Header{}
	h.Set(client.WebhookIDHeader, specID)
	h.Set(client.WebhookTimestampHeader, strconv.Itoa(specTimestamp))
	h.Set(client.WebhookSignatureHeader, sig)
	return h
}

func TestSignWebhookMatchesTheSpecVector(t *testing.T) {
	t.Parallel()
	key, err := client.WebhookKey(specSecret)
	if err != nil {
		t.Fatal(err)
	}
	if got := client.SignWebhook(key, specID, time.Unix(specTimestamp, 0), []byte(specBody)); got != specSignature {
		t.Errorf("SignWebhook = %q, want the spec's %q", got, specSignature)
	}
}

func TestVerifyWebhook(t *testing.T) {
	t.Parallel()
	signedAt := time.Unix(specTimestamp, 0)
	for _, tc := range []struct {
		name   string
		h      http.Header
		body   string
		now    time.Time
		secret string
		want   error
	}{
		{"as sent", specHeader(specSignature), specBody, signedAt.Add(time.Second), specSecret, nil},
		{"one of several signatures (a key rotation)", specHeader("v1,bm9wZQ== " + specSignature), specBody, signedAt, specSecret, nil},
		{"replayed 10 minutes later", specHeader(specSignature), specBody, signedAt.Add(10 * time.Minute), specSecret, client.ErrWebhookTimestamp},
		{"timestamp from the future", specHeader(specSignature), specBody, signedAt.Add(-10 * time.Minute), specSecret, client.ErrWebhookTimestamp},
		{"tampered body", specHeader(specSignature), `{"test": 2432232315}`, signedAt, specSecret, client.ErrWebhookSignature},
		{"another secret", specHeader(specSignature), specBody, signedAt, "whsec_" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", client.ErrWebhookSignature},
		{"a v2 signature only", specHeader("v2," + specSignature[3:]), specBody, signedAt, specSecret, client.ErrWebhookSignature},
		{"no signature", specHeader(""), specBody, signedAt, specSecret, client.ErrWebhookHeaders},
	} {
		err := client.VerifyWebhook(tc.secret, tc.h, []byte(tc.body), tc.now)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: VerifyWebhook = %v, want %v", tc.name, err, tc.want)
		}
	}
	// A re-timestamped replay: the attacker moves the timestamp into the
	// window but cannot re-sign.
	h := specHeader(specSignature)
	now := signedAt.Add(time.Hour)
	h.Set(client.WebhookTimestampHeader, strconv.FormatInt(now.Unix(), 10))
	if err := client.VerifyWebhook(specSecret, h, []byte(specBody), now); !errors.Is(err, client.ErrWebhookSignature) {
		t.Errorf("replay with a fresh timestamp: VerifyWebhook = %v, want ErrWebhookSignature", err)
	}
}

func TestWebhookKey(t *testing.T) {
	t.Parallel()
	if k, err := client.WebhookKey("raw-secret"); err != nil || string(k) != "raw-secret" {
		t.Errorf("WebhookKey(raw) = %q, %v; want the bytes as given", k, err)
	}
	if k, err := client.WebhookKey(specSecret); err != nil || len(k) != 24 {
		t.Errorf("WebhookKey(spec secret) = %d bytes, %v; want 24 decoded bytes", len(k), err)
	}
	if _, err := client.WebhookKey("whsec_not base64!"); err == nil {
		t.Error("WebhookKey(whsec_ with bad base64) succeeded")
	}
}

// TestSecurityEmptyWebhookSecretRefused (L9): a delivery signed with an empty key
// (anyone can make one) is refused when the receiver's secret is empty or
// "whsec_" alone, however well it is signed.
func TestSecurityEmptyWebhookSecretRefused(t *testing.T) {
	t.Parallel()
	now := time.Unix(specTimestamp, 0)
	body := []byte(specBody)
	for _, secret := range []string{"", client.WebhookSecretPrefix} {
		h := specHeader(client.SignWebhook(nil, "msg_forged", now, body))
		h.Set(client.WebhookIDHeader, "msg_forged")
		if err := client.VerifyWebhook(secret, h, body, now); !errors.Is(err, client.ErrWebhookSecret) {
			t.Errorf("VerifyWebhook(secret %q) of a delivery signed with an empty key = %v, want ErrWebhookSecret", secret, err)
		}
	}
}
