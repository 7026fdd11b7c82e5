package client

import (
	"context"
	"errors"
	"testing"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// errUnknownSymbol is a tool's own bug: no rule of the classifier names it.
var errUnknownSymbol = errors.New("quote: unknown symbol ZZZZ")

// failFive makes five calls from two workers (w1, w2, w1, w2, w1), each
// failing with err.
func failFive(t *testing.T, w1, w2 *Client, name string, err error) {
	t.Helper()
	for i := range 5 {
		c := w1
		if i%2 == 1 {
			c = w2
		}
		if got := c.Call(context.Background(), name, func(context.Context) error { return err }); !errors.Is(got, err) {
			t.Fatalf("call %d: %v, want the tool's own error", i, got)
		}
	}
}

// countingPolicies is a policy set where breakers matching counted count
// unrecognised errors, and every other breaker has the default policy.
func countingPolicies(t *testing.T, counted string) store.Options {
	t.Helper()
	set, err := policy.Parse([]byte("breakers:\n  - match: \"" + counted + "\"\n    count_unrecognised: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	return store.Options{Policies: set}
}

// TestUnrecognisedErrorsDoNotTripADefaultBreaker: five errors the client
// cannot name, from two workers, are each sent to breakerd (five Record
// RPCs) and leave a breaker with the default policy closed, with no
// failure run; under count_unrecognised the same five trip it.
func TestUnrecognisedErrorsDoNotTripADefaultBreaker(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, countingPolicies(t, b.Breaker("counted-*")))
		w1, w2 := dial(t, d.Addr, "w1"), dial(t, d.Addr, "w2")

		quote := b.Breaker("quote")
		failFive(t, w1, w2, quote, errUnknownSymbol)
		if got := d.Calls.Get("Record"); got != 5 {
			t.Fatalf("five failed calls: %d Record RPCs served, want 5 (each outcome is sent)", got)
		}
		if st := state(t, d, quote); st.GetState() != pb.State_STATE_CLOSED || st.GetFailures() != 0 {
			t.Errorf("five unrecognised errors from 2 workers, default policy: %v with %d failures, want CLOSED with 0",
				st.GetState(), st.GetFailures())
		}

		counted := b.Breaker("counted-quote")
		failFive(t, w1, w2, counted, errUnknownSymbol)
		if st := state(t, d, counted); st.GetState() != pb.State_STATE_OPEN {
			t.Errorf("five unrecognised errors from 2 workers under count_unrecognised: %v, want OPEN", st.GetState())
		}
	})
}

// TestWithIgnoreRecordsANeverCountedOutcome: errors the worker's ignore
// hook names are still sent (one Record each) but never counted, even on
// a breaker that counts unrecognised errors; other errors still are.
func TestWithIgnoreRecordsANeverCountedOutcome(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, countingPolicies(t, b.Breaker("counted-*")))
		ignore := WithIgnore(func(err error) bool { return errors.Is(err, errUnknownSymbol) })
		w1, w2 := dial(t, d.Addr, "w1", ignore), dial(t, d.Addr, "w2", ignore)

		name := b.Breaker("counted-quote")
		failFive(t, w1, w2, name, errUnknownSymbol)
		if got := d.Calls.Get("Record"); got != 5 {
			t.Fatalf("five ignored errors: %d Record RPCs served, want 5", got)
		}
		if st := state(t, d, name); st.GetState() != pb.State_STATE_CLOSED || st.GetFailures() != 0 {
			t.Errorf("five ignored errors: %v with %d failures, want CLOSED with 0", st.GetState(), st.GetFailures())
		}
		other := errors.New("quote: something else")
		failFive(t, w1, w2, name, other)
		if st := state(t, d, name); st.GetState() != pb.State_STATE_OPEN {
			t.Errorf("five errors the hook does not name, under count_unrecognised: %v, want OPEN", st.GetState())
		}
	})
}
