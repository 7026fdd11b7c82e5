package client

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// New wraps a connection the caller owns: calls go over it, and Close
// leaves it open.
func TestNewUsesTheCallersConnection(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testNewUsesTheCallersConnection(t, m) })
}

func testNewUsesTheCallersConnection(t *testing.T, m *clientMode) {
	b := testredis.Mini(t)
	d := start(t, b, withAlternatives())
	conn, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := New(conn, append(m.options(), WithWorkerID("agent"), WithAllowBudget(testBudget))...)
	want := 2 // the Allow and the Record
	if m.fast {
		eventually(t, "the fast view is live", func() bool { return c.view.live.Load() })
		want = 1 // the Allow: a success on a healthy breaker is not sent
		if n := d.Calls.Get("Watch"); n != 1 {
			t.Errorf("the daemon served %d Watch streams over the caller's connection, want 1", n)
		}
	}
	v := newVendor(t, http.StatusOK)
	if err := c.Call(context.Background(), b.Breaker("search"), v.call); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := d.Calls.Get("Allow") + records(d); n != want {
		t.Errorf("the daemon served %d Allow and outcome calls over the caller's connection, want %d", n, want)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if s := conn.GetState(); s == connectivity.Shutdown {
		t.Fatal("Close shut the caller's connection")
	}
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("the caller's connection after Close: %v", err)
	}
}

// WithRecordTimeout bounds the Record Call sends after the call, even
// when the caller's own context has no deadline. (A caller that gave up
// sends no Record at all: its cancellation is never counted.)
func TestRecordTimeoutBoundsTheRecord(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testRecordTimeoutBoundsTheRecord(t, m) })
}

func testRecordTimeoutBoundsTheRecord(t *testing.T, m *clientMode) {
	srv := &recordingServer{}
	addr := serveFake(t, srv)
	for _, tc := range []struct {
		opts []Option
		max  time.Duration
	}{
		{[]Option{WithRecordTimeout(300 * time.Millisecond)}, 300 * time.Millisecond},
		{nil, 2 * time.Second}, // the default
	} {
		c := m.dial(t, addr, "agent", tc.opts...)
		err := c.Call(context.Background(), "search", func(context.Context) error {
			return errors.New("boom")
		})
		if err == nil || err.Error() != "boom" {
			t.Fatalf("Call = %v, want fn's error", err)
		}
		if err := c.Flush(context.Background()); err != nil { // fast mode: the RecordBatch, bounded the same way
			t.Fatal(err)
		}
		srv.mu.Lock()
		got := srv.remaining[len(srv.remaining)-1]
		srv.mu.Unlock()
		if got <= 0 || got > tc.max {
			t.Errorf("Record arrived with %v left (-1: no deadline), want a deadline of at most %v", got, tc.max)
		}
	}
	if len(srv.remaining) != 2 {
		t.Errorf("the server saw %d Records, want 2", len(srv.remaining))
	}
}

// deadAddr is an address nothing listens on: breakerd unreachable. Port
// 1 on loopback, not a port freed by closing a listener: the kernel never
// hands out port 1 as an ephemeral port, so a test running beside this
// one (another copy of the suite) cannot come to listen there, as it
// could on a freed port (seen: the vendor got a third call through
// another process's server).
func deadAddr(*testing.T) string { return "127.0.0.1:1" }

// WithLocalPolicy sets the fallback breaker's threshold while breakerd is
// unreachable: with 2, the third call is denied without reaching the
// vendor; with the default 5 it goes out.
func TestLocalPolicyTunesTheFallback(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testLocalPolicyTunesTheFallback(t, m) })
}

func testLocalPolicyTunesTheFallback(t *testing.T, m *clientMode) {
	for _, tc := range []struct {
		name      string
		opts      []Option
		wantHits  int64
		wantOpen3 bool
	}{
		{"threshold 2", []Option{WithLocalPolicy(LocalPolicy{Threshold: 2})}, 2, true},
		{"default threshold 5", nil, 3, false},
	} {
		c := dial(t, deadAddr(t), "agent", append(m.options(), tc.opts...)...) // a fast view never goes live here
		v := newVendor(t, http.StatusServiceUnavailable)
		var last error
		for range 3 {
			last = c.Call(context.Background(), "payments", v.call)
		}
		var open *CircuitOpenError
		if errors.As(last, &open) != tc.wantOpen3 || (tc.wantOpen3 && !open.Degraded) {
			t.Errorf("%s: third call = %v, want local open %v", tc.name, last, tc.wantOpen3)
		}
		if got := v.hits.Load(); got != tc.wantHits {
			t.Errorf("%s: the vendor saw %d requests, want %d", tc.name, got, tc.wantHits)
		}
	}
}

// WithLogger reports breakerd going away and coming back.
func TestLoggerReportsUnreachableAndBack(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testLoggerReportsUnreachableAndBack(t, m) })
}

func testLoggerReportsUnreachableAndBack(t *testing.T, m *clientMode) {
	b := testredis.Mini(t)
	d := start(t, b, withAlternatives())
	addr := d.Addr
	var logs daemontest.Buffer
	c := m.dial(t, addr, "agent", WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), WithReconnectInterval(10*time.Millisecond))
	ctx := context.Background()
	if _, err := c.Allow(ctx, b.Breaker("search")); err != nil {
		t.Fatal(err)
	}
	d.Stop()
	if m.fast {
		// Until the stream's end reaches it, a fast view still answers the
		// closed breaker it knows; then breakerd is asked.
		eventually(t, "the view to see the stream end", func() bool { return !c.view.live.Load() })
	}
	// The client calls breakerd down after DownAfterFailures failures in
	// a row to reach it (each call meanwhile answered by the fallback).
	for range DownAfterFailures {
		if p, err := c.Allow(ctx, b.Breaker("search")); err != nil || !p.Degraded {
			t.Fatalf("Allow with breakerd stopped: %+v, %v; want a degraded answer", p, err)
		}
	}
	eventually(t, "the unreachable log line", func() bool {
		s := logs.String()
		return strings.Contains(s, "breakerd unreachable") && strings.Contains(s, "worker=agent")
	})
	daemontest.StartAt(t, b, withAlternatives(), addr)
	eventually(t, "the back-again log line", func() bool { return strings.Contains(logs.String(), "breakerd answers again") })
}

func TestDeniedErrorAndBreakerName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    pb.Decision
		want string // the error's type, "" for nil
	}{
		{pb.Decision_DECISION_ALLOWED, ""},
		{pb.Decision_DECISION_PROBE, ""},
		{pb.Decision_DECISION_DENIED_OPEN, "open"},
		{pb.Decision_DECISION_DENIED_FORCED_OPEN, "open"},
		{pb.Decision_DECISION_DENIED_PAUSED, "open"},
		{pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT, "probe"},
	} {
		err := DeniedError(&Permit{Breaker: "b", Decision: tc.d, Reason: "r", RetryAfter: time.Second})
		var open *CircuitOpenError
		var probe *ProbeInFlightError
		got := ""
		switch {
		case errors.As(err, &open):
			got = "open"
		case errors.As(err, &probe):
			got = "probe"
		case err != nil:
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("DeniedError(%v) = %v (%s), want %q", tc.d, err, got, tc.want)
		}
	}
	if got := (Tool{Name: "web_search"}).BreakerName(); got != "web_search" {
		t.Errorf("BreakerName without Breaker = %q, want the tool's name", got)
	}
	if got := (Tool{Name: "refund", Breaker: "stripe:acct_42"}).BreakerName(); got != "stripe:acct_42" {
		t.Errorf("BreakerName = %q, want the Breaker field", got)
	}
	inner := errors.New("EOF")
	if !errors.Is(&OutcomeError{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Err: inner}, inner) || !errors.Is(&MalformedOutputError{Err: inner}, inner) {
		t.Error("OutcomeError and MalformedOutputError do not unwrap to their cause")
	}
}

// degradedServer answers as a daemon that lost its Redis: from memory.
type degradedServer struct{ recordingServer }

func (s *degradedServer) Allow(context.Context, *pb.AllowRequest) (*pb.AllowResponse, error) {
	return &pb.AllowResponse{Decision: pb.Decision_DECISION_ALLOWED, Ticket: &pb.Ticket{}, Degraded: true}, nil
}

// A daemon answering from its own memory (its Redis away) marks the permit
// DaemonDegraded; the outcome still goes to that daemon, not to the
// client's local fallback.
func TestDaemonDegradedPermitIsRecordedAtTheDaemon(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testDaemonDegradedPermitIsRecordedAtTheDaemon(t, m) })
}

func testDaemonDegradedPermitIsRecordedAtTheDaemon(t *testing.T, m *clientMode) {
	srv := &degradedServer{}
	addr := serveFake(t, srv)
	c := m.dial(t, addr, "agent")
	p, err := c.Allow(context.Background(), "search")
	if err != nil || !p.DaemonDegraded || p.Degraded {
		t.Fatalf("Allow = %+v, %v; want DaemonDegraded and not Degraded", p, err)
	}
	if _, err := c.Record(context.Background(), p, Result{Outcome: pb.Outcome_OUTCOME_TIMEOUT}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.records) != 1 {
		t.Errorf("the daemon saw %d Records, want 1", len(srv.records))
	}
}
