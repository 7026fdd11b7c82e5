package daemon

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestLongTextIsCutBeforeItIsStoredOrLogged sends 100 KB of text through
// every field a caller controls that reaches the log or Redis: a Record's
// message (stored in an alert and logged), and a refused Force's reason,
// breaker and operator (logged). No log line and no stored reason holds
// more than a few hundred bytes of it.
func TestLongTextIsCutBeforeItIsStoredOrLogged(t *testing.T) {
	var logs daemontest.Buffer
	addr := serveConfig(t, baseConfig(t), &logs)
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	api := c.API()
	ctx := context.Background()
	long := strings.Repeat("A", 100<<10)
	name := "truncate-test"
	a, err := api.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: a.Ticket,
		Outcome: pb.Outcome_OUTCOME_UNAUTHENTICATED, Message: "401 " + long}); err != nil {
		t.Fatal(err)
	}
	_, err = api.Force(ctx, &pb.ForceRequest{Breaker: name, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: long, Operator: long})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Force with a 100 KB reason: %v, want InvalidArgument", err)
	}
	_, err = api.Force(ctx, &pb.ForceRequest{Breaker: long, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "r"})
	if status.Code(err) != codes.InvalidArgument || len(err.Error()) > 1024 {
		t.Fatalf("Force on a 100 KB breaker name: %d-byte error %.200v, want a short InvalidArgument", len(err.Error()), err)
	}
	evs, err := api.Events(ctx, &pb.EventsRequest{Breaker: name})
	if err != nil || len(evs.Events) == 0 {
		t.Fatalf("Events = %v, %v; want the credential alert", evs, err)
	}
	for _, e := range evs.Events {
		if len(e.Reason) > 1024 {
			t.Errorf("a stored reason of %d bytes", len(e.Reason))
		}
	}
	daemontest.Eventually(t, "the refused Force logged", func() bool { return strings.Contains(logs.String(), "force failed") })
	daemontest.Eventually(t, "the alert logged", func() bool { return strings.Contains(logs.String(), "credential_revoked") })
	for _, l := range strings.Split(logs.String(), "\n") {
		if len(l) > 2048 {
			t.Errorf("a %d-byte log line: %.200s…", len(l), l)
		}
	}
}
