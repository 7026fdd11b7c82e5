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

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestAStoppedDaemonDoesNotBlameRedis: a daemon stopped (SIGSTOP) while
// its callers' decisions are outstanding, and resumed well past their
// bound, finds Redis's replies waiting: it was late itself, Redis was
// not. It begins no outage (no "redis unreachable" line), and no call is
// answered from memory (those outstanding at the stop may fail: their
// replies were not read in time).
//
// Redis may be late too on a loaded host (miniredis shares the -race test
// process, and runs a script far slower than it answers a PING): a stop
// during which the test's own decisions came late is not judged, and the
// daemon is left to recover before the next. Three stops must be judged,
// within eight.
func TestAStoppedDaemonDoesNotBlameRedis(t *testing.T) {
	testredis.StallTier(t)
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		t.Parallel()
		const bound = time.Second
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
		witness := store.New(b.NewClient(t), store.Options{Outage: store.OutageUnavailable})
		defer witness.Close()
		pulse := startPulse(witness, l.names, bound/2)
		defer pulse.stop()
		stop := l.run(16)
		defer stop()
		judged := 0
		for i := 1; judged < 3; i++ {
			if i > 8 {
				t.Fatalf("only %d of 8 stops judged: Redis or this host was late in the others", judged)
			}
			if !l.stopOnce(t, p, bound, i, pulse) {
				return
			}
			judged++
		}
		stop()
		p.stop(t)
	})
}

// stopOnce stops the daemon for three bounds, resumes it and waits for
// 50 answers and two bounds after the resume. It reports whether the stop
// was judged (neither a "redis unreachable" line nor an answer from memory
// came meanwhile); when one came, it fails t unless the pulse saw Redis or
// the host late meanwhile, and then waits for the daemon to take Redis
// back, reporting false only when t failed.
func (l *lateLoad) stopOnce(t *testing.T, p *proc, bound time.Duration, i int, pulse *pulse) (judged bool) {
	t.Helper()
	from, flips, degraded := time.Now(), strings.Count(p.out.String(), "redis unreachable"), l.degraded.Load()
	before := l.answered.Load()
	until(t, "calls answered before the stop", p.out, func() bool { return l.answered.Load() >= before+50 })
	p.signal(t, syscall.SIGSTOP)
	time.Sleep(3 * bound) // the fault: a process that does not run past its decisions' bound
	p.signal(t, syscall.SIGCONT)
	resumed, after := time.Now(), l.answered.Load()
	until(t, fmt.Sprintf("calls answered after resume %d", i), p.out, func() bool {
		return l.answered.Load() >= after+50 && time.Since(resumed) >= 2*bound
	})
	out := p.out.String()
	if strings.Count(out, "redis unreachable") == flips && l.degraded.Load() == degraded {
		return true
	}
	if late, at := pulse.lateWithin(from.Add(-bound), time.Now()); late > 0 {
		t.Logf("stop %d not judged: a decision asked of Redis by this test came %s late at %s", i, late, at.Format("15:04:05.000"))
		until(t, "redis taken back", p.out, func() bool {
			o := p.out.String()
			down := strings.Count(o, "redis unreachable") - strings.Count(o, "redis unreachable: health")
			return strings.Count(o, "redis answers again") >= down
		})
		return false
	}
	t.Errorf("stop %d: %d calls answered from memory (the first: %s), and the test's own decisions were answered in time; want every call answered from Redis and no \"redis unreachable\" line:\n%s",
		i, l.degraded.Load()-degraded, l.first.Load(), out)
	return false
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

// pulse asks Redis for a decision, as the daemon does (an Allow of each
// of the load's breakers, by a store of the test's own that never answers
// from memory), every 20 ms from the test's own process, and keeps each
// round that came late (its answers, or its own tick, slow by at least its
// bound; a decision unanswered at the bound fails, and counts): Redis, or
// the host the test shares with it, was late then. A PING would not do:
// miniredis answers one at once while its scripts wait.
type pulse struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	late   []lateAt
}

type lateAt struct {
	at   time.Time
	late time.Duration
}

func startPulse(st *store.Store, names []string, bound time.Duration) *pulse {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pulse{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		const every = 20 * time.Millisecond
		next := time.Now().Add(every)
		for ctx.Err() == nil {
			time.Sleep(time.Until(next))
			start := time.Now()
			pctx, cancel := context.WithTimeout(ctx, bound) // a decision Redis holds is late at the bound, not when it ends
			err := decideAll(pctx, st, names)
			cancel()
			if late := max(start.Sub(next), time.Since(start)); late >= bound || (err != nil && ctx.Err() == nil) {
				p.mu.Lock()
				p.late = append(p.late, lateAt{at: time.Now(), late: late})
				p.mu.Unlock()
			}
			next = time.Now().Add(every)
		}
	}()
	return p
}

// decideAll asks st for an Allow of each name, by a worker of the
// pulse's own (its calls count toward no quorum: it records nothing).
func decideAll(ctx context.Context, st *store.Store, names []string) error {
	for _, name := range names {
		if _, err := st.Allow(ctx, name, "pulse"); err != nil {
			return err
		}
	}
	return nil
}

// lateWithin is the latest late round of the pulse between from and to,
// if any (0 when none).
func (p *pulse) lateWithin(from, to time.Time) (time.Duration, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.late) - 1; i >= 0; i-- {
		if x := p.late[i]; !x.at.Before(from) && !x.at.After(to) {
			return x.late, x.at
		}
	}
	return 0, time.Time{}
}

func (p *pulse) stop() {
	p.cancel()
	<-p.done
}
