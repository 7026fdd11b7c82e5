package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestAStoppedDaemonDoesNotBlameRedis: a daemon stopped (SIGSTOP) while
// its callers' decisions are outstanding, and resumed well past their
// bound, finds Redis's replies waiting: it was late itself, Redis was
// not. It begins no outage (no "redis unreachable" line), and no call is
// answered from memory (those outstanding at the stop may fail: their
// replies were not read in time).
func TestAStoppedDaemonDoesNotBlameRedis(t *testing.T) {
	testredis.StallTier(t)
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		t.Parallel()
		const bound = time.Second // far past a loaded Redis's reply (miniredis in a -race test process included)
		u, cluster := b.URL()
		addr := testredis.FreeAddr(t)
		args := []string{"--listen", addr, "--redis-url", u, "--redis-decision-timeout", bound.String()}
		if cluster {
			args = append(args, "--redis-cluster")
		}
		p := startDaemon(t, args...)
		serving(t, addr, p.out)
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		api := pb.NewBreakerServiceClient(conn)
		l := &lateLoad{api: api, names: []string{b.Breaker("search"), b.Breaker("fetch"), b.Breaker("mail")}}
		stop := l.run(16)
		for i := range 3 {
			before := l.answered.Load()
			until(t, "calls answered before the stop", p.out, func() bool { return l.answered.Load() >= before+50 })
			p.signal(t, syscall.SIGSTOP)
			time.Sleep(3 * bound) // the fault: a process that does not run past its decisions' bound
			p.signal(t, syscall.SIGCONT)
			after := l.answered.Load()
			until(t, fmt.Sprintf("calls answered after resume %d", i+1), p.out, func() bool { return l.answered.Load() >= after+50 })
		}
		stop()
		p.stop(t)
		if n := l.degraded.Load(); n > 0 {
			t.Errorf("%d calls answered from memory, the first: %s; want every call answered from Redis", n, l.first.Load())
		}
		if strings.Contains(p.out.String(), "redis unreachable") {
			t.Errorf("the daemon took Redis as unreachable while it was the one stopped:\n%s", p.out)
		}
	})
}

// lateLoad is callers that ask Allow in a loop, counting the answers and
// those given from memory.
type lateLoad struct {
	api                pb.BreakerServiceClient
	names              []string
	answered, degraded atomic.Int64
	first              atomic.Value // string: the first call answered from memory
}

// run starts n callers until stop.
func (l *lateLoad) run(n int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for c := range n {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				name, worker := l.names[i%len(l.names)], fmt.Sprintf("w%d", c)
				cctx, done := context.WithTimeout(ctx, time.Minute)
				a, err := l.api.Allow(cctx, &pb.AllowRequest{Breaker: name, WorkerId: worker})
				done()
				switch {
				case err != nil:
				case a.GetDegraded():
					l.degraded.Add(1)
					l.first.CompareAndSwap(nil, fmt.Sprintf("%s by %s: %s", name, worker, a.GetReason()))
					fallthrough
				default:
					l.answered.Add(1)
				}
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}
