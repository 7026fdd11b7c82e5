package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestSecurityWorkersReadTheEventsOfNamedBreakersOnly (N4): an Events
// read of every breaker scans the keyspace and holds each breaker's
// newest events to merge them, so its cost grows with the breakers any
// worker can create (one worker token's 16 such calls took a daemon from
// 43 MB to 1 GB). A worker token's Events without a breaker is
// PermissionDenied naming breaker, before any Redis command; the same
// token reads a named breaker's log, and an operator still reads every
// breaker's.
func TestSecurityWorkersReadTheEventsOfNamedBreakersOnly(t *testing.T) {
	const opToken = "events-operator-token-0123456789"
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		ctx := context.Background()
		d := startWithTokensFile(t, b, "tokens:\n  - {name: op, role: operator, token: "+opToken+"}\n"+
			"  - {name: w1, role: worker, token: "+w1Token+", workers: [w1]}\n")
		worker, op := api(t, d, w1Token), api(t, d, opToken)
		var names []string
		for i := range 3 {
			name := b.Breaker(fmt.Sprint("events-scope-", i))
			names = append(names, name)
			if _, err := op.Force(ctx, &pb.ForceRequest{Breaker: name, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "maintenance"}); err != nil {
				t.Fatal(err)
			}
		}
		b.ResetCounts()
		_, err := worker.Events(ctx, &pb.EventsRequest{})
		if status.Code(err) != codes.PermissionDenied || !strings.HasPrefix(status.Convert(err).Message(), "breaker: ") {
			t.Errorf("worker's Events() = %v, want PermissionDenied naming breaker", err)
		}
		if n := b.Commands(); n != 0 {
			t.Errorf("the refused Events issued %d Redis commands, want 0", n)
		}
		res, err := worker.Events(ctx, &pb.EventsRequest{Breaker: names[0]})
		if err != nil || len(res.GetEvents()) != 1 || res.GetEvents()[0].GetBreaker() != names[0] {
			t.Errorf("worker's Events(%q) = %v, %v; want its one event", names[0], res.GetEvents(), err)
		}
		res, err = op.Events(ctx, &pb.EventsRequest{})
		if err != nil {
			t.Fatalf("operator's Events() = %v", err)
		}
		seen := map[string]bool{}
		for _, e := range res.GetEvents() {
			seen[e.GetBreaker()] = true
		}
		for _, n := range names {
			if !seen[n] {
				t.Errorf("operator's Events() lacks %q's event: %v", n, res.GetEvents())
			}
		}
	})
}

// startWithTokensFile starts a daemon whose tokens file reads yaml.
func startWithTokensFile(t *testing.T, b *testredis.Backend, yaml string) *daemontest.Daemon {
	t.Helper()
	tk, err := auth.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return daemontest.StartWith(t, b, daemontest.Options{Server: auth.New(tk).ServerOptions()})
}
