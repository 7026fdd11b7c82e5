package client_test

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/breakerd/breakerd/pkg/client"
)

// A receiver of breakerd's alert hooks checks each delivery before acting
// on it, and drops repeats by webhook-id. Here a delivery is made by hand
// with SignWebhook, as the daemon signs it.
func ExampleVerifyWebhook() {
	const secret = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" // as in the hooks file
	body := []byte(`{"event":"opened","breaker":"stripe:acct_42"}`)
	sentAt := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	key, _ := client.WebhookKey(secret)
	h := http.Header{}
	h.Set(client.WebhookIDHeader, "evt_0123")
	h.Set(client.WebhookTimestampHeader, fmt.Sprint(sentAt.Unix()))
	h.Set(client.WebhookSignatureHeader, client.SignWebhook(key, "evt_0123", sentAt, body))

	// In an http.Handler: body, _ := io.ReadAll(r.Body); VerifyWebhook(secret, r.Header, body, time.Now()).
	fmt.Println("on arrival:", client.VerifyWebhook(secret, h, body, sentAt.Add(2*time.Second)))
	err := client.VerifyWebhook(secret, h, body, sentAt.Add(time.Hour))
	fmt.Println("replayed an hour later refused:", errors.Is(err, client.ErrWebhookTimestamp))
	err = client.VerifyWebhook(secret, h, []byte(`{"event":"closed","breaker":"stripe:acct_42"}`), sentAt.Add(2*time.Second))
	fmt.Println("tampered body refused:", errors.Is(err, client.ErrWebhookSignature))
	// Output:
	// on arrival: <nil>
	// replayed an hour later refused: true
	// tampered body refused: true
}
