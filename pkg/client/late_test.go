package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// freeze sits in front of a daemon's Record and RecordBatch: while frozen,
// each one that arrives is held (counted in arrived) until thaw, then
// served, as by a daemon stopped with SIGSTOP between a call's Allow and
// its Record and continued later (the kernel kept the request). A
// stalling proxy would swallow the request instead.
type freeze struct {
	mu      sync.Mutex
	gate    chan struct{} // nil: not frozen; closed on thaw
	arrived atomic.Int64
}

func (f *freeze) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gate = make(chan struct{})
}

func (f *freeze) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gate != nil {
		close(f.gate)
		f.gate = nil
	}
}

func (f *freeze) server() grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		switch req.(type) {
		case *pb.RecordRequest, *pb.RecordBatchRequest:
			f.mu.Lock()
			gate := f.gate
			f.mu.Unlock()
			if gate != nil {
				f.arrived.Add(1)
				<-gate
			}
		}
		return h(ctx, req)
	})
}

// frozenDaemon starts a daemon whose Records the returned freeze holds,
// thawed when the test ends (before its clients close).
func frozenDaemon(t *testing.T, b *testredis.Backend) (*daemontest.Daemon, *freeze) {
	t.Helper()
	f := &freeze{}
	d := daemontest.StartWith(t, b, daemontest.Options{Server: []grpc.ServerOption{f.server()}})
	return d, f
}

// expiring is a caller's context whose deadline passes when the test says
// (expire), not on the wall clock: from then on Done is closed and Err is
// context.DeadlineExceeded.
type expiring struct {
	context.Context
	at   time.Time
	done chan struct{}
	once sync.Once
}

func newExpiring() *expiring {
	return &expiring{Context: context.Background(), at: time.Now().Add(time.Hour), done: make(chan struct{})}
}

func (e *expiring) expire()                     { e.once.Do(func() { close(e.done) }) }
func (e *expiring) Deadline() (time.Time, bool) { return e.at, true }
func (e *expiring) Done() <-chan struct{}       { return e.done }

func (e *expiring) Err() error {
	select {
	case <-e.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// returned is whether Call, run in the background, has returned (its
// error in *err).
func returned(ch <-chan error, err *error) func() bool {
	return func() bool {
		select {
		case *err = <-ch:
			return true
		default:
			return false
		}
	}
}

// failures is the breaker's failure count as the daemon holds it.
func failures(t *testing.T, d *daemontest.Daemon, name string) int64 {
	t.Helper()
	return state(t, d, name).GetFailures()
}

var errVendor = &OutcomeError{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: "HTTP 503"}

// TestCallIsNotLatePastItsDeadline: a daemon that answers the Allow and
// then freezes does not hold Call past the caller's deadline (the record
// timeout is an hour): Call returns fn's error while its Record is held at
// the daemon, and the Record is counted there once the daemon continues.
// Strict, open-cache and fast clients alike (fast mode queues its
// outcomes), and CallValidated, which is Call.
func TestCallIsNotLatePastItsDeadline(t *testing.T) {
	t.Parallel()
	modes := []struct {
		name      string
		opts      []Option
		validated bool
	}{
		{name: "strict"},
		{name: "validated", validated: true},
		{name: "open-cache", opts: []Option{WithOpenCache()}},
		{name: "fast", opts: []Option{WithFastMode(), WithClock(newFakeClock())}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := testredis.Mini(t)
			d, f := frozenDaemon(t, b)
			c := dial(t, d.Addr, "w", append([]Option{WithRecordTimeout(time.Hour)}, m.opts...)...)
			t.Cleanup(f.thaw) // before c closes: Close waits for Records in flight
			name := b.Breaker("search")
			ctx := newExpiring()
			fn := func(context.Context) error {
				f.freeze() // the daemon stops after its Allow
				ctx.expire()
				return errVendor
			}
			ch := make(chan error, 1)
			go func() {
				if m.validated {
					_, err := CallValidated(ctx, c, name, func(ctx context.Context) (int, error) { return 0, fn(ctx) }, nil)
					ch <- err
					return
				}
				ch <- c.Call(ctx, name, fn)
			}()
			var err error
			eventually(t, "Call to return at its deadline while the daemon is frozen", returned(ch, &err))
			if !errors.Is(err, errVendor) {
				t.Errorf("Call = %v, want fn's error unchanged", err)
			}
			if n := failures(t, d, name); n != 0 {
				t.Fatalf("the daemon counted %d failures while frozen", n)
			}
			eventually(t, "the Record to reach the frozen daemon", func() bool { return f.arrived.Load() == 1 })
			f.thaw()
			eventually(t, "the held Record to be counted", func() bool { return failures(t, d, name) == 1 })
		})
	}
}

// TestCallWaitsForItsRecordNoLongerThanTheAllowBudget: with no deadline,
// Call waits for its Record as long as an Allow waits for breakerd (the
// budget's timer fires when the test says), then returns with the Record
// still held at the frozen daemon; the Record is counted once it goes on.
func TestCallWaitsForItsRecordNoLongerThanTheAllowBudget(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d, f := frozenDaemon(t, b)
	budget := make(chan time.Time)
	var timers atomic.Int64
	c := dial(t, d.Addr, "w", WithRecordTimeout(time.Hour), func(o *options) {
		o.after = func(string, time.Duration) (<-chan time.Time, func() bool) {
			timers.Add(1)
			return budget, func() bool { return true }
		}
	})
	t.Cleanup(f.thaw)
	name := b.Breaker("search")
	ch := make(chan error, 1)
	go func() {
		ch <- c.Call(context.Background(), name, func(context.Context) error { f.freeze(); return errVendor })
	}()
	eventually(t, "the Record to reach the frozen daemon", func() bool { return f.arrived.Load() == 1 })
	eventually(t, "Call to start the budget's timer for its Record", func() bool { return timers.Load() == 2 })
	var err error
	if returned(ch, &err)() {
		t.Fatalf("Call returned (%v) before its Record was answered or its budget passed", err)
	}
	close(budget)
	eventually(t, "Call to return once its budget has passed", returned(ch, &err))
	if !errors.Is(err, errVendor) {
		t.Errorf("Call = %v, want fn's error unchanged", err)
	}
	if n := failures(t, d, name); n != 0 {
		t.Fatalf("the daemon counted %d failures while frozen", n)
	}
	f.thaw()
	eventually(t, "the held Record to be counted", func() bool { return failures(t, d, name) == 1 })
}

// TestPanickingProbeSettlesItsLeaseAfterItsDeadline: a probe whose tool
// panics after the caller's deadline, the daemon frozen, panics through
// Call at once; its CANCELED still reaches the daemon once it goes on, and
// hands the lease back (another worker gets the PROBE).
func TestPanickingProbeSettlesItsLeaseAfterItsDeadline(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d, f := frozenDaemon(t, b)
	c1 := dial(t, d.Addr, "w1", WithRecordTimeout(time.Hour))
	c2 := dial(t, d.Addr, "w2")
	t.Cleanup(f.thaw)
	name := b.Breaker("search")
	trip(t, c1, c2, name)
	pol := policy.Default()
	b.Advance(time.Duration(float64(pol.CooldownBase)*(1+pol.Jitter)) + time.Millisecond) // the longest first cooldown
	ctx := newExpiring()
	ch := make(chan any, 1)
	go func() {
		defer func() { ch <- recover() }()
		err := c1.Call(ctx, name, func(context.Context) error {
			f.freeze()
			ctx.expire()
			panic("tool bug")
		})
		t.Errorf("Call = %v, want the tool's panic", err)
	}()
	var got any
	eventually(t, "the panic to leave Call while the daemon is frozen", func() bool {
		select {
		case got = <-ch:
			return true
		default:
			return false
		}
	})
	if got != "tool bug" {
		t.Fatalf("recovered %v, want the tool's panic", got)
	}
	eventually(t, "the CANCELED to reach the frozen daemon", func() bool { return f.arrived.Load() == 1 })
	if !state(t, d, name).GetProbeInFlight() {
		t.Fatal("the probe's lease was released while the daemon was frozen")
	}
	f.thaw()
	eventually(t, "the lease to be handed back", func() bool { return !state(t, d, name).GetProbeInFlight() })
	if p, err := c2.Allow(context.Background(), name); err != nil || p.Decision != pb.Decision_DECISION_PROBE {
		t.Fatalf("Allow after the released probe = %v, %v; want PROBE", p, err)
	}
}
