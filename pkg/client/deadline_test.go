package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// hops is two fake daemons' shared script: the first Allow (at either)
// waits for release and is answered Unavailable, as a daemon's bounded
// decision on a stalled Redis is; every later one stalls until its
// deadline. Each Allow's deadline, as the daemon received it, is kept.
type hops struct {
	pb.UnimplementedBreakerServiceServer
	release chan struct{}
	arrived chan time.Time // each Allow's deadline, in order
	mu      sync.Mutex
	n       int
}

func (h *hops) Allow(ctx context.Context, _ *pb.AllowRequest) (*pb.AllowResponse, error) {
	dl, _ := ctx.Deadline()
	h.mu.Lock()
	h.n++
	first := h.n == 1
	h.mu.Unlock()
	h.arrived <- dl
	if first {
		<-h.release
		return nil, status.Error(codes.Unavailable, "redis decision bound passed")
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestFailoverSpendsOnlyTheCallersDeadline: a call whose first daemon
// answers Unavailable after a delay the test ends, and whose second
// stalls, ends at the caller's deadline: the second daemon gets what is
// left of it (the deadline it received is the caller's), not a fresh RPC
// timeout of its own. The deadline each daemon received is the witness.
// Before, the RPC had a bound of its own (the RPC timeout) detached from
// the caller's: a late daemon could run it past the caller's deadline.
func TestFailoverSpendsOnlyTheCallersDeadline(t *testing.T) {
	t.Parallel()
	h := &hops{release: make(chan struct{}), arrived: make(chan time.Time, 8)}
	c := dial(t, serveFake(t, h)+","+serveFake(t, h), "w", WithAllowBudget(10*time.Second), WithRPCTimeout(10*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	callerEnd, _ := ctx.Deadline()
	done := make(chan error, 1)
	go func() {
		p, err := c.Allow(ctx, "search")
		if err == nil && !p.Degraded {
			err = errors.New("an answer from a daemon, which none gave")
		}
		done <- err
	}()
	// grpc sends a deadline as a timeout, rounded up within its unit: a
	// few milliseconds at most, far below the RPC timeout's 9 s more.
	const wire = 500 * time.Millisecond
	for i, what := range []string{"the first daemon", "the second daemon"} {
		dl := <-h.arrived
		if dl.After(callerEnd.Add(wire)) {
			t.Errorf("%s received a deadline %v after the caller's: a bound of its own", what, dl.Sub(callerEnd).Round(time.Millisecond))
		}
		if i == 0 {
			close(h.release)
		}
	}
	// At the deadline the RPC's end and the caller's race: either is
	// right (the fallback's answer, or the caller's DeadlineExceeded).
	if err := <-done; err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Allow at the caller's deadline = %v, want the fallback's answer or the context's DeadlineExceeded", err)
	}
}
