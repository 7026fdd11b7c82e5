package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/server"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func dial(t *testing.T, d *daemontest.Daemon, worker string) *client.Client {
	t.Helper()
	// No Allow budget, and an RPC timeout far past a busy host's answers:
	// these tests check the daemon's answers, and on a loaded machine the
	// client's 50ms budget or 2s RPC and Record timeouts would answer some
	// locally.
	c, err := client.Dial(d.Addr, client.WithWorkerID(worker), client.WithAllowBudget(0), client.WithRPCTimeout(time.Minute), client.WithRecordTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// vendor is a fake dependency that counts the requests that reach it.
type vendor struct {
	srv    *httptest.Server
	hits   atomic.Int64
	status atomic.Int64
}

func newVendor(t *testing.T, status int) *vendor {
	v := &vendor{}
	v.status.Store(int64(status))
	v.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.hits.Add(1)
		w.WriteHeader(int(v.status.Load()))
	}))
	t.Cleanup(v.srv.Close)
	return v
}

// call is a tool call to the vendor, classified by HTTP status.
func (v *vendor) call(ctx context.Context) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, v.srv.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 500:
		return &client.OutcomeError{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: resp.Status}
	case resp.StatusCode >= 400:
		return &client.OutcomeError{Outcome: pb.Outcome_OUTCOME_INVALID_ARGUMENT, Message: resp.Status}
	}
	return nil
}

func TestBadInputIsInvalidArgumentAndStoresNothing(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.Start(t, b, store.Options{})
		api := dial(t, d, "w1").API()
		ctx := context.Background()
		long := strings.Repeat("x", 257)
		cases := []struct {
			name  string
			call  func() error
			field string
		}{
			{"empty breaker", func() error { _, err := api.Allow(ctx, &pb.AllowRequest{WorkerId: "w1"}); return err }, "breaker"},
			{"long breaker", func() error { _, err := api.Allow(ctx, &pb.AllowRequest{Breaker: long, WorkerId: "w1"}); return err }, "breaker"},
			{"control char", func() error {
				_, err := api.Allow(ctx, &pb.AllowRequest{Breaker: "web\x00search", WorkerId: "w1"})
				return err
			}, "breaker"},
			{"no worker", func() error { _, err := api.Allow(ctx, &pb.AllowRequest{Breaker: b.Breaker("x")}); return err }, "worker_id"},
			{"no outcome", func() error {
				_, err := api.Record(ctx, &pb.RecordRequest{Breaker: b.Breaker("x"), WorkerId: "w1"})
				return err
			}, "outcome"},
			{"unknown outcome", func() error {
				_, err := api.Record(ctx, &pb.RecordRequest{Breaker: b.Breaker("x"), WorkerId: "w1", Outcome: 99})
				return err
			}, "outcome"},
			{"negative retry", func() error {
				_, err := api.Record(ctx, &pb.RecordRequest{Breaker: b.Breaker("x"), WorkerId: "w1", Outcome: pb.Outcome_OUTCOME_RATE_LIMITED, RetryAfterMs: -1})
				return err
			}, "retry_after_ms"},
			{"force without reason", func() error {
				_, err := api.Force(ctx, &pb.ForceRequest{Breaker: b.Breaker("x"), Mode: pb.ForceMode_FORCE_MODE_OPEN})
				return err
			}, "reason"},
			{"force without mode", func() error {
				_, err := api.Force(ctx, &pb.ForceRequest{Breaker: b.Breaker("x"), Reason: "r"})
				return err
			}, "mode"},
			{"padded worker", func() error {
				_, err := api.Allow(ctx, &pb.AllowRequest{Breaker: b.Breaker("x"), WorkerId: " w1"})
				return err
			}, "worker_id"},
			{"no ticket", func() error {
				_, err := api.Record(ctx, &pb.RecordRequest{Breaker: b.Breaker("x"), WorkerId: "w1", Outcome: pb.Outcome_OUTCOME_TIMEOUT})
				return err
			}, "ticket"},
			{"huge lease token", func() error {
				_, err := api.Record(ctx, &pb.RecordRequest{Breaker: b.Breaker("x"), WorkerId: "w1", Outcome: pb.Outcome_OUTCOME_TIMEOUT,
					Ticket: &pb.Ticket{LeaseToken: strings.Repeat("t", 65)}})
				return err
			}, "ticket.lease_token"},
			{"negative parent generation", func() error {
				_, err := api.Record(ctx, &pb.RecordRequest{Breaker: b.Breaker("x"), WorkerId: "w1", Outcome: pb.Outcome_OUTCOME_TIMEOUT,
					Ticket: &pb.Ticket{ParentGeneration: -1}})
				return err
			}, "ticket.parent_generation"},
			{"parent lease token with a control character", func() error {
				_, err := api.Record(ctx, &pb.RecordRequest{Breaker: b.Breaker("x"), WorkerId: "w1", Outcome: pb.Outcome_OUTCOME_TIMEOUT,
					Ticket: &pb.Ticket{ParentLeaseToken: "t\x00"}})
				return err
			}, "ticket.parent_lease_token"},
			{"long record id", func() error {
				_, err := api.Record(ctx, &pb.RecordRequest{Breaker: b.Breaker("x"), WorkerId: "w1", Outcome: pb.Outcome_OUTCOME_TIMEOUT,
					Ticket: &pb.Ticket{}, RecordId: strings.Repeat("r", 65)})
				return err
			}, "record_id"},
			{"centuries of Retry-After", func() error {
				_, err := api.Record(ctx, &pb.RecordRequest{Breaker: b.Breaker("x"), WorkerId: "w1", Outcome: pb.Outcome_OUTCOME_RATE_LIMITED,
					Ticket: &pb.Ticket{}, RetryAfterMs: 9_000_000_000_000})
				return err
			}, "retry_after_ms"},
			{"force for 584 years", func() error {
				_, err := api.Force(ctx, &pb.ForceRequest{Breaker: b.Breaker("x"), Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "r", TtlMs: 18446744074710})
				return err
			}, "ttl_ms"},
			{"batch with a bad name", func() error {
				_, err := api.BatchGet(ctx, &pb.BatchGetRequest{Breakers: []string{b.Breaker("ok"), ""}})
				return err
			}, "breakers[1]"},
			{"page of 1001", func() error { _, err := api.List(ctx, &pb.ListRequest{PageSize: 1001}); return err }, "page_size"},
			{"negative page", func() error { _, err := api.List(ctx, &pb.ListRequest{PageSize: -1}); return err }, "page_size"},
			{"forged page token", func() error {
				_, err := api.List(ctx, &pb.ListRequest{PageSize: 10, PageToken: "bm9wZXwx"})
				return err
			}, "page_token"},
			{"token without a page size", func() error { _, err := api.List(ctx, &pb.ListRequest{PageToken: "x"}); return err }, "page_token"},
			{"shadow mode without a setting", func() error {
				_, err := api.Force(ctx, &pb.ForceRequest{Breaker: b.Breaker("x"), Mode: pb.ForceMode_FORCE_MODE_SHADOW, Reason: "r"})
				return err
			}, "shadow"},
			{"unknown shadow setting", func() error {
				_, err := api.Force(ctx, &pb.ForceRequest{Breaker: b.Breaker("x"), Mode: pb.ForceMode_FORCE_MODE_SHADOW, Shadow: 9, Reason: "r"})
				return err
			}, "shadow"},
			{"shadow on without a reason", func() error {
				_, err := api.Force(ctx, &pb.ForceRequest{Breaker: b.Breaker("x"), Mode: pb.ForceMode_FORCE_MODE_SHADOW,
					Shadow: pb.ShadowSetting_SHADOW_SETTING_ON})
				return err
			}, "reason"},
			{"shadow with a ttl", func() error {
				_, err := api.Force(ctx, &pb.ForceRequest{Breaker: b.Breaker("x"), Mode: pb.ForceMode_FORCE_MODE_SHADOW,
					Shadow: pb.ShadowSetting_SHADOW_SETTING_OFF, Reason: "r", TtlMs: 1000})
				return err
			}, "ttl_ms"},
			{"a shadow setting with a pin", func() error {
				_, err := api.Force(ctx, &pb.ForceRequest{Breaker: b.Breaker("x"), Mode: pb.ForceMode_FORCE_MODE_OPEN,
					Shadow: pb.ShadowSetting_SHADOW_SETTING_ON, Reason: "r"})
				return err
			}, "shadow"},
		}
		for _, tc := range cases {
			err := tc.call()
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field+":") {
				t.Errorf("%s: %v, want InvalidArgument naming %s", tc.name, err, tc.field)
			}
		}
		if b.Mini != nil {
			if keys := b.Mini.Keys(); len(keys) != 0 {
				t.Errorf("bad input stored keys %v", keys)
			}
		}
		keys := store.KeysOf(b.Breaker("x"))
		for _, k := range []string{keys.State, keys.Workers, keys.Events} {
			if n, _ := b.Client.Exists(ctx, k).Result(); n != 0 {
				t.Errorf("bad input stored %s", k)
			}
		}
	})
}

func TestInvalidArgumentsNeverTrip(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.Start(t, b, store.Options{})
		v := newVendor(t, http.StatusBadRequest)
		name := b.Breaker("refund_charge")
		for i := range 10 {
			c := dial(t, d, fmt.Sprintf("w%d", i%3))
			var oe *client.OutcomeError
			if err := c.Call(context.Background(), name, v.call); !errors.As(err, &oe) {
				t.Fatalf("call %d: %v, want the 400 back", i, err)
			}
		}
		if got := v.hits.Load(); got != 10 {
			t.Errorf("the vendor saw %d requests, want all 10", got)
		}
	})
}

func TestOpenCircuitKeepsCallsOffTheWire(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d1 := daemontest.Start(t, b, store.Options{})
		d2 := daemontest.Start(t, b, store.Options{})
		v := newVendor(t, http.StatusServiceUnavailable)
		name := b.Breaker("web_search")
		w1, w2 := dial(t, d1, "w1"), dial(t, d2, "w2")
		ctx := context.Background()
		for range 5 {
			_ = w1.Call(ctx, name, v.call)
		}
		if st, _ := d1.Store.Get(ctx, name); st.State != pb.State_STATE_CLOSED {
			t.Fatalf("5 failures from one worker: %v, want CLOSED (quorum)", st.State)
		}
		_ = w2.Call(ctx, name, v.call)
		if got := v.hits.Load(); got != 6 {
			t.Fatalf("vendor saw %d requests, want 6", got)
		}
		for _, c := range []*client.Client{w1, w2} {
			var open *client.CircuitOpenError
			err := c.Call(ctx, name, v.call)
			if !errors.As(err, &open) || !strings.Contains(open.Reason, "failing: 6 failed calls in a row, last: server error (5xx)") || strings.Contains(open.Reason, "Service Unavailable") || open.RetryAfter <= 0 {
				t.Fatalf("Do on an open circuit via %s: %v, want CircuitOpenError with the reason and a retry_after", c.WorkerID(), err)
			}
		}
		if got := v.hits.Load(); got != 6 {
			t.Errorf("denied calls reached the vendor: %d requests, want 6", got)
		}
		// After the cooldown the vendor is back: one probe closes it.
		b.Advance(36 * time.Second)
		v.status.Store(http.StatusOK)
		if err := w2.Call(ctx, name, v.call); err != nil {
			t.Fatalf("probe: %v", err)
		}
		if st, _ := d1.Store.Get(ctx, name); st.State != pb.State_STATE_CLOSED {
			t.Fatalf("after the probe succeeded: %v, want CLOSED", st.State)
		}
		if got := v.hits.Load(); got != 7 {
			t.Errorf("vendor saw %d requests, want 7 (one probe)", got)
		}
	})
}

func TestExactlyOneProbeAcrossTwoDaemons(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		daemons := []*daemontest.Daemon{daemontest.Start(t, b, store.Options{}), daemontest.Start(t, b, store.Options{})}
		name := b.Breaker("web_search")
		ctx := context.Background()
		for i := range 5 {
			c := dial(t, daemons[i%2], fmt.Sprintf("w%d", i%2))
			p, err := c.Allow(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Record(ctx, p, client.Result{Outcome: pb.Outcome_OUTCOME_TIMEOUT}); err != nil {
				t.Fatal(err)
			}
		}
		b.Advance(36 * time.Second) // past the cooldown and its jitter
		var probes, inFlight, other atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 50 {
			c := dial(t, daemons[i%2], fmt.Sprintf("g%d", i))
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				p, err := c.Allow(ctx, name)
				switch {
				case err != nil:
					t.Error(err)
				case p.Decision == pb.Decision_DECISION_PROBE:
					probes.Add(1)
				case p.Decision == pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT:
					inFlight.Add(1)
				default:
					other.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if probes.Load() != 1 || inFlight.Load() != 49 || other.Load() != 0 {
			t.Errorf("50 concurrent Allows over 2 daemons: %d PROBE, %d PROBE_IN_FLIGHT, %d other; want 1, 49, 0",
				probes.Load(), inFlight.Load(), other.Load())
		}
		if n := daemons[0].Calls.Get("Allow") + daemons[1].Calls.Get("Allow"); n != 55 {
			t.Errorf("daemons served %d Allows, want 55", n)
		}
	})
}

func TestWatchSeesEveryDaemonsTransitions(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d1 := daemontest.Start(t, b, store.Options{})
		d2 := daemontest.Start(t, b, store.Options{})
		name := b.Breaker("web_search")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stream, err := dial(t, d1, "watcher").API().Watch(ctx, &pb.WatchRequest{Breakers: []string{name}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Header(); err != nil { // the subscription is live
			t.Fatal(err)
		}
		ops := dial(t, d2, "ops").API()
		if _, err := ops.Force(ctx, &pb.ForceRequest{Breaker: name, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "maintenance", Operator: "alice"}); err != nil {
			t.Fatal(err)
		}
		if _, err := ops.Force(ctx, &pb.ForceRequest{Breaker: b.Breaker("other"), Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "x"}); err != nil {
			t.Fatal(err)
		}
		if _, err := ops.Force(ctx, &pb.ForceRequest{Breaker: name, Mode: pb.ForceMode_FORCE_MODE_AUTO}); err != nil {
			t.Fatal(err)
		}
		for _, want := range []struct{ from, to pb.State }{
			{pb.State_STATE_CLOSED, pb.State_STATE_FORCED_OPEN},
			{pb.State_STATE_FORCED_OPEN, pb.State_STATE_CLOSED},
		} {
			m, err := stream.Recv()
			for err == nil && m.GetEvent() == nil { // heartbeats
				m, err = stream.Recv()
			}
			if err != nil {
				t.Fatal(err)
			}
			e := m.GetEvent()
			if e.Breaker != name || e.Kind != pb.EventKind_EVENT_KIND_FORCED || e.From != want.from || e.To != want.to || e.Id == "" || e.AtMs == 0 {
				t.Fatalf("event %v, want FORCED %v -> %v on %s", e, want.from, want.to, name)
			}
			if want.to == pb.State_STATE_FORCED_OPEN && (e.Actor != "alice" || e.Reason != "maintenance") {
				t.Errorf("force event actor %q reason %q, want alice, maintenance", e.Actor, e.Reason)
			}
		}
	})
}

func TestListFiltersByState(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.Start(t, b, store.Options{})
		api := dial(t, d, "ops").API()
		ctx := context.Background()
		open, closed := b.Breaker("a"), b.Breaker("b")
		if _, err := api.Force(ctx, &pb.ForceRequest{Breaker: open, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "r"}); err != nil {
			t.Fatal(err)
		}
		if _, err := api.Force(ctx, &pb.ForceRequest{Breaker: closed, Mode: pb.ForceMode_FORCE_MODE_CLOSED, Reason: "r"}); err != nil {
			t.Fatal(err)
		}
		res, err := api.List(ctx, &pb.ListRequest{States: []pb.State{pb.State_STATE_FORCED_OPEN}})
		if err != nil {
			t.Fatal(err)
		}
		var mine []string
		for _, s := range res.States {
			if strings.HasPrefix(s.Breaker, b.Prefix) {
				mine = append(mine, s.Breaker)
			}
		}
		if len(mine) != 1 || mine[0] != open {
			t.Errorf("List(FORCED_OPEN) = %v, want [%s]", mine, open)
		}
	})
}

func TestStartingAndJoiningWriteNothing(t *testing.T) {
	b := testredis.Mini(t) // an empty keyspace to count in
	d := daemontest.Start(t, b, store.Options{})
	ctx := context.Background()
	for i := range 10 {
		c := dial(t, d, fmt.Sprintf("new-worker-%d", i))
		for _, name := range []string{"web_search", "stripe:acct_42"} {
			p, err := c.Allow(ctx, name)
			if err != nil || !p.Allowed() {
				t.Fatalf("Allow(%q) = %v, %v", name, p, err)
			}
			if _, err := c.Record(ctx, p, client.Result{Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.API().BatchGet(ctx, &pb.BatchGetRequest{Breakers: []string{"web_search", "crm"}}); err != nil {
			t.Fatal(err)
		}
	}
	if keys := b.Mini.Keys(); len(keys) != 0 {
		t.Errorf("a daemon starting and 10 workers joining wrote keys %v, want none", keys)
	}
}

func TestFailureTextIsKeptOnOneLine(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.Start(t, b, store.Options{})
		c := dial(t, d, "w1")
		ctx := context.Background()
		name := b.Breaker("web_search")
		for _, msg := range []string{"HTTP 503\nService Unavailable", strings.Repeat("a", 255) + "é"} {
			p, err := c.Allow(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			r, err := c.API().Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: p.Ticket, Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: msg})
			if err != nil || !r.Counted {
				t.Fatalf("Record with message %q: %v, %v; want counted", msg, r, err)
			}
			if last := r.State.LastFailureMessage; strings.ContainsAny(last, "\n\x00") || !utf8.ValidString(last) {
				t.Errorf("last failure message %q is not one clean line", last)
			}
		}
		if st, _ := d.Store.Get(ctx, name); st.Failures != 2 || st.LastFailure != "server error (5xx)" || st.LastFailureMessage != strings.Repeat("a", 255) {
			t.Errorf("state: %d failures, last %q, message %q", st.Failures, st.LastFailure, st.LastFailureMessage)
		}
	})
}

func TestHealthAnswersForTheServerAndTheService(t *testing.T) {
	g, hs := server.New(nil, nil).NewGRPC()
	defer g.Stop()
	ctx := context.Background()
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		res, err := hs.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("Check(%q) = %v", service, err)
		}
		return res.Status
	}
	for i, serving := range []bool{false, true, false} {
		if i > 0 { // the first round checks the initial status
			server.SetServing(hs, serving)
		}
		want := healthpb.HealthCheckResponse_NOT_SERVING
		if serving {
			want = healthpb.HealthCheckResponse_SERVING
		}
		for _, name := range []string{"", "breakerd.v1.BreakerService"} {
			if got := check(name); got != want {
				t.Errorf("after SetServing(%v): Check(%q) = %v, want %v", serving, name, got, want)
			}
		}
	}
	hs.Shutdown()
	if got := check("breakerd.v1.BreakerService"); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("after Shutdown: Check(breakerd.v1.BreakerService) = %v, want NOT_SERVING", got)
	}
}

func TestRecordBatchValidatesEveryRecordAndCountsEach(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.Start(t, b, store.Options{})
		api := dial(t, d, "w1").API()
		ctx := context.Background()
		name := b.Breaker("search")
		rec := func(worker string, o pb.Outcome) *pb.RecordRequest {
			return &pb.RecordRequest{Breaker: name, WorkerId: worker, Ticket: &pb.Ticket{}, Outcome: o}
		}
		for _, c := range []struct {
			what string
			req  *pb.RecordBatchRequest
			want string
		}{
			{"empty", &pb.RecordBatchRequest{}, "records: must hold 1 to 1024"},
			{"too many", &pb.RecordBatchRequest{Records: make([]*pb.RecordRequest, 1025)}, "records: must hold 1 to 1024"},
			{"a bad outcome", &pb.RecordBatchRequest{Records: []*pb.RecordRequest{rec("w1", pb.Outcome_OUTCOME_TIMEOUT), rec("w2", 99)}}, "records[1].outcome:"},
			{"no ticket", &pb.RecordBatchRequest{Records: []*pb.RecordRequest{{Breaker: name, WorkerId: "w1", Outcome: pb.Outcome_OUTCOME_TIMEOUT}}}, "records[0].ticket:"},
			{"a bad name", &pb.RecordBatchRequest{Records: []*pb.RecordRequest{rec("w1", pb.Outcome_OUTCOME_TIMEOUT), {Breaker: "", WorkerId: "w1", Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_TIMEOUT}}}, "records[1].breaker"},
		} {
			_, err := api.RecordBatch(ctx, c.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.want) {
				t.Errorf("RecordBatch with %s: %v, want InvalidArgument containing %q", c.what, err, c.want)
			}
		}
		if st := state(t, d, name); st.GetFailures() != 0 {
			t.Fatalf("after refused batches: %d failures, want 0 (a refused batch applies nothing)", st.GetFailures())
		}
		// One batch: each record counts as a Record would, in order.
		res, err := api.RecordBatch(ctx, &pb.RecordBatchRequest{Records: []*pb.RecordRequest{
			rec("w1", pb.Outcome_OUTCOME_TIMEOUT), rec("w2", pb.Outcome_OUTCOME_TIMEOUT), rec("w1", pb.Outcome_OUTCOME_NOT_FOUND)}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.GetResults()) != 3 || !res.Results[0].GetCounted() || !res.Results[1].GetCounted() || res.Results[2].GetCounted() {
			t.Fatalf("results %v, want counted, counted, not counted", res.GetResults())
		}
		if st := state(t, d, name); st.GetFailures() != 2 || st.GetDistinctWorkers() != 2 {
			t.Errorf("after the batch: %d failures from %d workers, want 2 from 2", st.GetFailures(), st.GetDistinctWorkers())
		}
	})
}

func state(t *testing.T, d *daemontest.Daemon, name string) *pb.BreakerState {
	t.Helper()
	st, err := d.Store.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
