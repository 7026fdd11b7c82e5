package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func TestDeniedCallNeverReachesTheDependency(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testDeniedCallNeverReachesTheDependency(t, m) })
}

func testDeniedCallNeverReachesTheDependency(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, withAlternatives("issue_refund_manually"))
		v := newVendor(t, http.StatusServiceUnavailable)
		name := b.Breaker("payments")
		w1, w2 := m.dial(t, d.Addr, "w1"), m.dial(t, d.Addr, "w2")
		ctx := context.Background()
		for i := range 5 {
			c := []*Client{w1, w2}[i%2]
			var he *HTTPError
			if err := c.Call(ctx, name, v.call); !errors.As(err, &he) || he.StatusCode != 503 {
				t.Fatalf("call %d: %v, want the 503 back", i, err)
			}
		}
		m.settle(t, d, name, w1, w2)
		if st := state(t, d, name); st.State != pb.State_STATE_OPEN {
			t.Fatalf("after 5 503s from 2 workers: %v, want OPEN", st.State)
		}
		sent := records(d)
		for _, c := range []*Client{w1, w2, w1} {
			ran := false
			err := c.Call(ctx, name, func(ctx context.Context) error { ran = true; return v.call(ctx) })
			var open *CircuitOpenError
			if !errors.As(err, &open) || ran {
				t.Fatalf("Call on an open circuit: %v (fn ran: %v), want *CircuitOpenError and fn not run", err, ran)
			}
			if open.RetryAfter < 29*time.Second || open.Reason != "it is failing: 5 failed calls in a row, last: server error (5xx)" {
				t.Errorf("denial: %+v", open)
			}
			if len(open.Alternatives) != 1 || open.Alternatives[0] != "issue_refund_manually" {
				t.Errorf("alternatives %v, want the policy's [issue_refund_manually]", open.Alternatives)
			}
		}
		if got := v.hits.Load(); got != 5 {
			t.Errorf("the vendor saw %d requests, want 5: denied calls must not reach it", got)
		}
		if err := errors.Join(w1.Flush(ctx), w2.Flush(ctx)); err != nil {
			t.Fatal(err)
		}
		if got := records(d) - sent; got != 0 {
			t.Errorf("denied calls sent %d Records, want 0", got)
		}

		// The structured answer the model sees.
		err := w1.Call(ctx, name, v.call)
		den, ok := AsDenial(err, "refund_charge")
		if !ok {
			t.Fatalf("AsDenial(%v) not a denial", err)
		}
		var got map[string]any
		if err := json.Unmarshal(den.JSON(), &got); err != nil {
			t.Fatal(err)
		}
		in, _ := got["may_return_in_ms"].(float64)
		want := map[string]any{"status": "circuit_open", "tool": "refund_charge", "scope": "breaker",
			"reason": den.Reason, "may_return_in_ms": in, "alternatives": []any{"issue_refund_manually"}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("JSON %s\nwant %v", den.JSON(), want)
		}
		if in < 29000 || in > 30000 {
			t.Errorf("may_return_in_ms %v, want about 30000", in)
		}
	})
}

func TestClientErrorsNeverTrip(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testClientErrorsNeverTrip(t, m) })
}

func testClientErrorsNeverTrip(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, store.Options{})
		ctx := context.Background()
		workers := []*Client{m.dial(t, d.Addr, "w1"), m.dial(t, d.Addr, "w2"), m.dial(t, d.Addr, "w3")}
		for _, code := range []int{400, 401, 403, 404, 409, 422} {
			v := newVendor(t, code)
			name := b.Breaker(fmt.Sprintf("tool-%d", code))
			for i := range 12 {
				var he *HTTPError
				if err := workers[i%3].Call(ctx, name, v.call); !errors.As(err, &he) || he.StatusCode != code {
					t.Fatalf("HTTP %d call %d: %v, want the response back", code, i, err)
				}
			}
			if got := v.hits.Load(); got != 12 {
				t.Errorf("HTTP %d: the vendor saw %d requests, want all 12", code, got)
			}
			for _, w := range workers {
				if err := w.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if st := state(t, d, name); st.State != pb.State_STATE_CLOSED || st.Failures != 0 {
				t.Errorf("HTTP %d x12 from 3 workers: %v with %d failures, want CLOSED with 0", code, st.State, st.Failures)
			}
		}
	})
}

func TestRetryAfterAgainstTheCallersDeadline(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testRetryAfterAgainstTheCallersDeadline(t, m) })
}

func testRetryAfterAgainstTheCallersDeadline(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, store.Options{})
		w1, w2 := m.dial(t, d.Addr, "w1"), m.dial(t, d.Addr, "w2")
		v := newVendor(t, http.StatusTooManyRequests)
		call := func(c *Client, name string) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = c.Call(ctx, name, v.call)
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// A Retry-After the caller can wait out (5s within 20s) never counts.
		within := b.Breaker("within")
		v.setRetryAfter(5)
		for i := range 6 {
			call([]*Client{w1, w2}[i%2], within)
		}
		if st := state(t, d, within); st.State != pb.State_STATE_CLOSED || st.Failures != 0 {
			t.Errorf("6 429s with Retry-After 5s, deadline 20s: %v, %d failures; want CLOSED, 0", st.State, st.Failures)
		}
		// Beyond it (120s), three in a row from two workers open the circuit.
		beyond := b.Breaker("beyond")
		v.setRetryAfter(120)
		for i := range 3 {
			call([]*Client{w1, w2}[i%2], beyond)
		}
		st := state(t, d, beyond)
		if st.State != pb.State_STATE_OPEN || st.CooldownMs < 120000 {
			t.Errorf("3 429s with Retry-After 120s, deadline 20s: %v cooldown %dms; want OPEN for at least 120s", st.State, st.CooldownMs)
		}
		// The HTTP-date form is read the same way.
		date := b.Breaker("date")
		v.retryAfter.Store(time.Now().Add(10 * time.Minute).UTC().Format(http.TimeFormat))
		for i := range 3 {
			call([]*Client{w1, w2}[i%2], date)
		}
		if st := state(t, d, date); st.State != pb.State_STATE_OPEN {
			t.Errorf("3 429s with an HTTP-date 10m away, deadline 20s: %v, want OPEN", st.State)
		}
	})
}

func TestProbeInFlightDeniesOthers(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testProbeInFlightDeniesOthers(t, m) })
}

func testProbeInFlightDeniesOthers(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, withAlternatives())
		w1, w2 := m.dial(t, d.Addr, "w1"), m.dial(t, d.Addr, "w2")
		name := b.Breaker("search")
		trip(t, w1, w2, name)
		m.settle(t, d, name, w1, w2)
		m.advance(b, 31*time.Second)
		ctx := context.Background()
		p, err := w1.Allow(ctx, name)
		if err != nil || p.Decision != pb.Decision_DECISION_PROBE {
			t.Fatalf("after the cooldown: %v, %v; want PROBE", p, err)
		}
		ran := false
		err = w2.Call(ctx, name, func(context.Context) error { ran = true; return nil })
		var pe *ProbeInFlightError
		if !errors.As(err, &pe) || ran {
			t.Fatalf("Call during the probe: %v (ran %v), want *ProbeInFlightError, fn not run", err, ran)
		}
		den, _ := AsDenial(err, "web_search")
		if !strings.HasPrefix(string(den.JSON()), `{"status":"probe_in_flight","tool":"web_search","reason":"it failed and is being tested with a single call; its recovery is not confirmed yet"`) ||
			!strings.Contains(string(den.JSON()), `"may_return_in_ms":0,"alternatives":[]`) || strings.Contains(string(den.JSON()), "ask again") {
			t.Errorf("JSON %s", den.JSON())
		}
		if _, err := w1.Record(ctx, p, Result{Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
			t.Fatal(err)
		}
		m.settle(t, d, name, w1, w2)
		if err := w2.Call(ctx, name, func(context.Context) error { return nil }); err != nil {
			t.Errorf("after the probe succeeded: %v, want the call made", err)
		}
	})
}

func TestValidatorMarksMalformedOutput(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testValidatorMarksMalformedOutput(t, m) })
}

func testValidatorMarksMalformedOutput(t *testing.T, m *clientMode) {
	b := testredis.Mini(t)
	d := start(t, b, store.Options{})
	c := m.dial(t, d.Addr, "w1")
	name := b.Breaker("search")
	type results struct{ Items []string }
	validate := func(r results) error {
		if len(r.Items) == 0 {
			return errors.New("no items")
		}
		return nil
	}
	ctx := context.Background()
	_, err := CallValidated(ctx, c, name, func(context.Context) (results, error) { return results{}, nil }, validate)
	var me *MalformedOutputError
	if !errors.As(err, &me) {
		t.Fatalf("empty output: %v, want *MalformedOutputError", err)
	}
	m.settle(t, d, name, c)
	if st := state(t, d, name); st.Failures != 1 || !strings.HasPrefix(st.LastFailure, "malformed output") {
		t.Errorf("after a rejected 200: %d failures, last %q; want 1, malformed output", st.Failures, st.LastFailure)
	}
	sent := records(d)
	out, err := CallValidated(ctx, c, name, func(context.Context) (results, error) { return results{Items: []string{"a"}}, nil }, validate)
	if err != nil || len(out.Items) != 1 {
		t.Fatalf("good output: %v, %v", out, err)
	}
	m.settle(t, d, name, c)
	if st := state(t, d, name); st.Failures != 0 {
		t.Errorf("after a valid 200: %d failures, want 0 (reset)", st.Failures)
	}
	if n := records(d) - sent; n != 1 { // fast mode too: a success during a run is sent
		t.Errorf("the valid call sent %d outcome RPCs, want 1", n)
	}
}

func TestCallersCancellationIsNotRecorded(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testCallersCancellationIsNotRecorded(t, m) })
}

func testCallersCancellationIsNotRecorded(t *testing.T, m *clientMode) {
	b := testredis.Mini(t)
	d := start(t, b, store.Options{})
	c := m.dial(t, d.Addr, "w1")
	name := b.Breaker("search")
	ctx, cancel := context.WithCancel(context.Background())
	err := c.Call(ctx, name, func(ctx context.Context) error { cancel(); <-ctx.Done(); return ctx.Err() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want context.Canceled back", err)
	}
	m.settle(t, d, name, c)
	if n := records(d); n != 0 {
		t.Errorf("a call the caller canceled sent %d outcome RPCs, want 0", n)
	}
	if n := d.Calls.Get("Allow"); n != 1 {
		t.Errorf("the call cost %d Allow RPCs, want 1 (a breaker neither mode knew yet)", n)
	}
}

func TestWrappedClassifier(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testWrappedClassifier(t, m) })
}

func testWrappedClassifier(t *testing.T, m *clientMode) {
	b := testredis.Mini(t)
	counting := policy.Default()
	counting.CountUnrecognised = true // so that the default classifier's reading counts
	d := start(t, b, store.Options{Policies: policy.NewSet(counting)})
	type quotaError struct{ error }
	classify := func(ctx context.Context, err error) (Result, bool) {
		var q quotaError
		if errors.As(err, &q) {
			return Result{Outcome: pb.Outcome_OUTCOME_INVALID_ARGUMENT, Message: "over our own quota"}, true
		}
		return DefaultClassifier(ctx, err)
	}
	plain, wrapped := m.dial(t, d.Addr, "w1"), m.dial(t, d.Addr, "w2", WithClassifier(classify))
	ctx := context.Background()
	mine, theirs := b.Breaker("mine"), b.Breaker("theirs")
	quota := func(context.Context) error { return quotaError{errors.New("quota")} }
	_ = wrapped.Call(ctx, mine, quota)
	_ = plain.Call(ctx, theirs, quota)
	m.settle(t, d, mine, wrapped)
	m.settle(t, d, theirs, plain)
	if st := state(t, d, mine); st.Failures != 0 {
		t.Errorf("wrapped classifier: %d failures, want 0 (its own type read as INVALID_ARGUMENT)", st.Failures)
	}
	if st := state(t, d, theirs); st.Failures != 1 {
		t.Errorf("default classifier: %d failures, want 1 (an unknown error is UNRECOGNISED, counted under count_unrecognised)", st.Failures)
	}
	// The wrapper still falls through to the default rows.
	_ = wrapped.Call(ctx, mine, func(context.Context) error { return &HTTPError{StatusCode: 503, Status: "503"} })
	m.settle(t, d, mine, wrapped)
	if st := state(t, d, mine); st.Failures != 1 {
		t.Errorf("wrapped classifier on a 503: %d failures, want 1", st.Failures)
	}
	if n := records(d); n != 3 {
		t.Errorf("3 failed calls sent %d outcome RPCs, want 3 (a failure is never skipped)", n)
	}
}

func TestBreakerdDenialInsideACallNeverTripsTheOuterBreaker(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testBreakerdDenialInsideACall(t, m) })
}

// testBreakerdDenialInsideACall: an outer tool calls a sub-tool through
// breakerd, and the sub-tool's breaker is open. The outer call fails
// with the sub-tool's denial, from two workers, more often than the
// threshold: the outer dependency did nothing wrong, so its breaker stays
// closed with no failure counted.
func testBreakerdDenialInsideACall(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, store.Options{})
		ctx := context.Background()
		w1, w2 := m.dial(t, d.Addr, "w1"), m.dial(t, d.Addr, "w2")
		inner, outer := b.Breaker("sub-tool"), b.Breaker("outer-tool")
		trip(t, w1, w2, inner)
		m.settle(t, d, inner, w1, w2) // fast mode: both views know the sub-tool open
		v := newVendor(t, http.StatusOK)
		for i := range 8 {
			w := []*Client{w1, w2}[i%2]
			err := w.Call(ctx, outer, func(ctx context.Context) error { return w.Call(ctx, inner, v.call) })
			var open *CircuitOpenError
			if !errors.As(err, &open) || open.Breaker != inner {
				t.Fatalf("outer call %d: %v, want the sub-tool's denial", i, err)
			}
		}
		if got := v.hits.Load(); got != 0 {
			t.Errorf("the sub-tool's vendor saw %d requests, want 0", got)
		}
		m.settle(t, d, outer, w1, w2)
		if st := state(t, d, outer); st.State != pb.State_STATE_CLOSED || st.Failures != 0 {
			t.Errorf("outer breaker after 8 sub-tool denials from 2 workers: %v with %d failures, want CLOSED with 0", st.State, st.Failures)
		}
	})
}
