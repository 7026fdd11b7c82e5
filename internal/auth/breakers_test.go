package auth_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

const (
	searchToken = "search-worker-token-0123456789"
	opsToken    = "search-operator-token-0123456789"
)

// limited runs a daemon whose tokens are limited to the breakers under
// b's prefix "search:*": a worker and an operator.
func limited(t *testing.T, b *testredis.Backend, extra ...grpc.ServerOption) *daemontest.Daemon {
	t.Helper()
	tk, err := auth.Parse([]byte(`
tokens:
  - name: search-pool
    role: worker
    token: ` + searchToken + `
    workers: [w1]
    breakers: ["` + b.Breaker("search:*") + `"]
  - name: search-ops
    role: operator
    token: ` + opsToken + `
    breakers: ["` + b.Breaker("search:*") + `"]
  - name: alice
    role: operator
    token: ` + aliceToken + `
`))
	if err != nil {
		t.Fatal(err)
	}
	return daemontest.StartWith(t, b, daemontest.Options{Server: append(auth.New(tk).ServerOptions(), extra...)})
}

// TestBreakerGlobsLimitEveryCallThatNamesBreakers walks every RPC that
// names breakers with a token limited to "search:*": inside, served;
// outside, PermissionDenied before the store is reached (its state stays
// absent).
func TestBreakerGlobsLimitEveryCallThatNamesBreakers(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := limited(t, b)
		ctx := context.Background()
		in, out := b.Breaker("search:web"), b.Breaker("stripe:acct_42")
		w := dial(t, d.Addr, client.WithToken(searchToken))
		ops := dial(t, d.Addr, client.WithToken(opsToken))
		alice := dial(t, d.Addr, client.WithToken(aliceToken))

		a, err := w.Allow(ctx, &pb.AllowRequest{Breaker: in, WorkerId: "w1"})
		if err != nil {
			t.Fatalf("Allow(%q) inside the glob: %v", in, err)
		}
		if _, err := w.Record(ctx, &pb.RecordRequest{Breaker: in, WorkerId: "w1", Ticket: a.Ticket, Outcome: pb.Outcome_OUTCOME_TIMEOUT}); err != nil {
			t.Fatalf("Record(%q) inside the glob: %v", in, err)
		}
		// The breaker outside holds state, so a List has something to hide.
		if _, err := alice.Force(ctx, &pb.ForceRequest{Breaker: out, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "drill"}); err != nil {
			t.Fatal(err)
		}

		const denied = "may not name breaker"
		for what, call := range map[string]func() error{
			"Allow": func() error { _, err := w.Allow(ctx, &pb.AllowRequest{Breaker: out, WorkerId: "w1"}); return err },
			"Record": func() error {
				_, err := w.Record(ctx, &pb.RecordRequest{Breaker: out, WorkerId: "w1", Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_UNAUTHENTICATED, CredentialWorked: true})
				return err
			},
			"Get":      func() error { _, err := w.Get(ctx, &pb.GetRequest{Breaker: out}); return err },
			"BatchGet": func() error { _, err := w.BatchGet(ctx, &pb.BatchGetRequest{Breakers: []string{in, out}}); return err },
			"Force": func() error {
				_, err := ops.Force(ctx, &pb.ForceRequest{Breaker: out, Mode: pb.ForceMode_FORCE_MODE_AUTO})
				return err
			},
			"Events":        func() error { _, err := ops.Events(ctx, &pb.EventsRequest{Breaker: out}); return err },
			"worker Events": func() error { _, err := w.Events(ctx, &pb.EventsRequest{Breaker: out}); return err },
			"ReportSavings": func() error {
				_, err := w.ReportSavings(ctx, &pb.ReportSavingsRequest{WorkerId: "w1", Reports: []*pb.SavingsReport{{Breaker: in, LocalDenials: 1}, {Breaker: out, LocalDenials: 1}}})
				return err
			},
			"Savings": func() error { _, err := w.Savings(ctx, &pb.SavingsRequest{Breakers: []string{in, out}}); return err },
			"Watch": func() error {
				s, err := w.Watch(ctx, &pb.WatchRequest{Breakers: []string{in, out}})
				if err == nil {
					_, err = s.Recv()
				}
				return err
			},
		} {
			wantCode(t, what+" outside the glob", call(), codes.PermissionDenied, denied)
		}
		// Asking for every breaker is asking outside the glob.
		wantCode(t, "Events of every breaker", func() error { _, err := ops.Events(ctx, &pb.EventsRequest{}); return err }(), codes.PermissionDenied, "name one breaker")
		s, err := w.Watch(ctx, &pb.WatchRequest{})
		if err == nil {
			_, err = s.Recv()
		}
		wantCode(t, "Watch of every breaker", err, codes.PermissionDenied, "must name its breakers")
		wantCode(t, "Savings of every breaker", func() error { _, err := w.Savings(ctx, &pb.SavingsRequest{}); return err }(), codes.PermissionDenied, "must name its breakers")
		// A worker reports only as its own worker id.
		_, err = w.ReportSavings(ctx, &pb.ReportSavingsRequest{WorkerId: "w2", Reports: []*pb.SavingsReport{{Breaker: in, LocalDenials: 1}}})
		wantCode(t, "ReportSavings as another worker", err, codes.PermissionDenied, "may not act as worker")
		// Nothing a refused report named was counted: alice's read of the
		// breaker outside shows no client denials.
		if sv, err := alice.Savings(ctx, &pb.SavingsRequest{Breakers: []string{in, out}}); err != nil || sv.GetCallsAvoided() != 0 {
			t.Errorf("Savings after refused reports = %v, %v; want nothing counted", sv, err)
		}

		// Nothing outside was touched: still forced open by alice, and
		// the denied Record left no pause.
		st, err := d.Store.Get(ctx, out)
		if err != nil || st.State != pb.State_STATE_FORCED_OPEN || st.ForcedBy != "alice" {
			t.Errorf("Get(%q) = %v, %v; want FORCED_OPEN by alice, untouched", out, st, err)
		}

		// Inside the glob, reads work; a List shows only what it may see.
		if _, err := w.BatchGet(ctx, &pb.BatchGetRequest{Breakers: []string{in}}); err != nil {
			t.Errorf("BatchGet inside the glob: %v", err)
		}
		if _, err := ops.Events(ctx, &pb.EventsRequest{Breaker: in}); err != nil {
			t.Errorf("Events inside the glob: %v", err)
		}
		// A worker reads the log of its breakers, as it watches them live.
		if evs, err := w.Events(ctx, &pb.EventsRequest{Breaker: in}); err != nil {
			t.Errorf("worker Events inside the glob: %v", err)
		} else if len(evs.Events) != 0 {
			t.Errorf("worker Events of %s = %d events, want none yet (one failure trips nothing)", in, len(evs.Events))
		}
		l, err := client.ListEvery(ctx, w, &pb.ListRequest{PageSize: store.MaxPageSize}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, st := range l {
			names = append(names, st.Breaker)
		}
		if strings.Contains(strings.Join(names, " "), out) || !strings.Contains(strings.Join(names, " "), in) {
			t.Errorf("List by the limited token = %v; want %s and not %s", names, in, out)
		}
		// A List that fails is refused as it is for anyone, and the
		// daemon goes on serving.
		_, err = w.List(ctx, &pb.ListRequest{PageSize: 10, PageToken: "not-a-page-token"})
		wantCode(t, "List by the limited token with a bad page token", err, codes.InvalidArgument, "page_token")
		if _, err := w.Get(ctx, &pb.GetRequest{Breaker: in}); err != nil {
			t.Errorf("Get after the failed List: %v", err)
		}
		all, err := client.ListEvery(ctx, alice, &pb.ListRequest{PageSize: store.MaxPageSize}, time.Minute)
		var both int
		for _, st := range all {
			if st.Breaker == in || st.Breaker == out {
				both++
			}
		}
		if err != nil || both != 2 {
			t.Errorf("List by an unlimited operator: %d of the two, %v; want both", both, err)
		}
	})
}

// TestUnknownTokensAreRefusedBeforeTheRequestIsRead sends a request larger
// than the server's receive limit: without a token (or with an unknown
// one) the answer is Unauthenticated, so the tap refused it before its
// body was read; with a token it is ResourceExhausted (read, and too big).
// Neither reaches a handler.
func TestUnknownTokensAreRefusedBeforeTheRequestIsRead(t *testing.T) {
	d := start(t, testredis.Mini(t), grpc.MaxRecvMsgSize(4<<10))
	conn, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := pb.NewBreakerServiceClient(conn)
	big := &pb.BatchGetRequest{Breakers: make([]string, 200)}
	for i := range big.Breakers {
		big.Breakers[i] = strings.Repeat("x", 100)
	}
	for _, c := range []struct {
		header string
		want   codes.Code
		msg    string
	}{
		{"", codes.Unauthenticated, "authorization: missing"},
		{"Bearer not-a-token-at-all-0123456789", codes.Unauthenticated, "unknown bearer token"},
		{"Bearer " + poolToken, codes.ResourceExhausted, "larger than max"},
	} {
		ctx := context.Background()
		if c.header != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", c.header)
		}
		_, err := api.BatchGet(ctx, big)
		wantCode(t, "a 20 KB BatchGet with "+c.header, err, c.want, c.msg)
	}
	if n := d.Calls.Total(); n != 0 {
		t.Errorf("%d calls reached the handlers, want 0", n)
	}
}
