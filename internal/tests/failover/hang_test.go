package failover

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
)

// overtakenLimit is how many requests may start after a handler's
// context ended and be answered while that handler still runs before it
// counts as hung. It counts work, not time: a handler that only waits for
// a busy machine to run it again is overtaken by the few requests ahead
// of it in the scheduler's queue, on a slow machine as on a fast one; one
// blocked on something its context does not end (a dial or a read
// without the deadline, a lock held across Redis I/O) is overtaken by
// every request the daemons serve meanwhile.
const overtakenLimit = 500

// hangs watches the daemons' handlers (a gRPC interceptor on each). A
// client's deadline cannot show a hang: grpc-go returns DeadlineExceeded
// to the caller at its deadline whatever the handler does, so how late a
// call returns measures only how busy the test's own process is. A hang
// is a handler that goes on after its context ended while the daemons
// serve requests that started after that.
type hangs struct {
	started atomic.Int64 // handlers started: the sequence of each

	mu       sync.Mutex
	inflight map[*handlerCall]struct{}
	handled  int64
	worst    int64 // most requests that overtook one handler
	worstOf  string
}

type handlerCall struct {
	method    string
	seq       int64
	endedAt   atomic.Int64 // the sequence when its context ended; 0 while it has not
	overtaken int64        // under hangs.mu
}

func newHangs() *hangs { return &hangs{inflight: map[*handlerCall]struct{}{}} }

func (h *hangs) option() grpc.ServerOption { return grpc.ChainUnaryInterceptor(h.intercept) }

func (h *hangs) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	c := &handlerCall{method: info.FullMethod, seq: h.started.Add(1)}
	stop := context.AfterFunc(ctx, func() { c.endedAt.Store(h.started.Load()) })
	h.mu.Lock()
	h.inflight[c] = struct{}{}
	h.mu.Unlock()
	resp, err := next(ctx, req)
	stop()
	h.done(c)
	return resp, err
}

// done removes c and counts it against every handler still running whose
// context ended before c started.
func (h *hangs) done(c *handlerCall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.inflight, c)
	h.handled++
	for o := range h.inflight {
		if e := o.endedAt.Load(); e != 0 && c.seq > e {
			o.overtaken++
			if o.overtaken > h.worst {
				h.worst, h.worstOf = o.overtaken, fmt.Sprintf("%s (handler %d)", o.method, o.seq)
			}
		}
	}
}

// check waits until every handler has returned (one blocked for good
// never does: Eventually names it at the test's deadline) and fails t if
// one was overtaken by more than overtakenLimit later requests. Call it
// after the load has stopped.
func (h *hangs) check(t *testing.T, what string) {
	t.Helper()
	daemontest.Eventually(t, what+": every handler to return", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.inflight) == 0
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	t.Logf("%s: %d handlers; the most overtaken after its context ended: %d (%s)", what, h.handled, h.worst, h.worstOf)
	if h.worst > overtakenLimit {
		t.Errorf("%s: handler %s still ran after its context ended while %d requests that started later were answered (limit %d): it waits on something its context does not end",
			what, h.worstOf, h.worst, overtakenLimit)
	}
}

// TestHangsSeesAHandlerBlockedPastItsContext: a handler that waits on
// something its context does not end, while later requests are answered,
// is found; handlers that end with their context are not.
func TestHangsSeesAHandlerBlockedPastItsContext(t *testing.T) {
	for _, blocked := range []bool{false, true} {
		h := newHangs()
		release := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		returned := make(chan struct{})
		go func() {
			defer close(returned)
			_, _ = h.intercept(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "Slow"}, func(ctx context.Context, _ any) (any, error) {
				if blocked {
					<-release // a lock or a dial its context does not end
				} else {
					<-ctx.Done()
				}
				return nil, ctx.Err()
			})
		}()
		daemontest.Eventually(t, "the slow handler to start", func() bool { return h.started.Load() == 1 })
		cancel()
		if !blocked {
			<-returned
		}
		var c handlerCall
		daemontest.Eventually(t, "its context's end to be seen", func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			for o := range h.inflight {
				c.endedAt.Store(o.endedAt.Load())
			}
			return !blocked || c.endedAt.Load() != 0
		})
		for range overtakenLimit + 1 {
			_, _ = h.intercept(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "Fast"}, func(context.Context, any) (any, error) { return nil, nil })
		}
		close(release)
		<-returned
		if got := h.worst > overtakenLimit; got != blocked {
			t.Errorf("blocked=%v: the slow handler was overtaken %d times (limit %d): judged hung %v, want %v", blocked, h.worst, overtakenLimit, got, blocked)
		}
	}
}
