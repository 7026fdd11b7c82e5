package bench

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
)

// opFunc is one operation of a scenario, run by caller (0..callers-1) as
// its i-th call. A non-nil error counts as an error, not as an op.
type opFunc func(ctx context.Context, caller, i int) error

// sample is one timed run of one scenario.
type sample struct {
	ops     int64
	errs    int64
	err     error // the first of the errs, nil for none
	elapsed time.Duration
	lat     []time.Duration // every successful op's latency, sorted
	cmds    int64           // Redis commands (INFO commandstats) during the run
	scripts int64           // of which script runs (EVALSHA, EVAL and their read-only forms)
	rpcs    int64           // RPCs the bench sent during the run
	resyncs int64           // the fast views' resyncs during the run (each a listing: scripts of its own)
	top     string          // the commands Redis ran most during the run (topCommands)
	cpu     time.Duration   // CPU time of the scenario's server process
	hasCPU  bool            // cpu was measured
	// clientCPU is the driver's CPU time over the timed run: a client's
	// driver as it counts it, or the bench's own process for the rows its
	// goroutines drive (getrusage; 0 where the system has none).
	clientCPU time.Duration
	redisCPU  time.Duration // Redis's CPU time during the run (INFO cpu)
}

func (s sample) rate() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.ops) / s.elapsed.Seconds()
}

// drive runs op on callers goroutines until d has passed or maxOps ops have
// started, then waits for the calls in flight.
func drive(ctx context.Context, callers int, d time.Duration, maxOps int64, op opFunc) sample {
	var started, errs atomic.Int64
	var first sync.Once
	var firstErr error
	lats := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, 1024)
			for i := 0; ; i++ {
				if ctx.Err() != nil || started.Add(1) > maxOps {
					break
				}
				t0 := time.Now()
				if t0.After(deadline) {
					break
				}
				if err := op(ctx, c, i); err != nil {
					errs.Add(1)
					first.Do(func() { firstErr = err })
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			lats[c] = mine
		}()
	}
	wg.Wait()
	s := sample{errs: errs.Load(), err: firstErr, elapsed: time.Since(start)}
	for _, l := range lats {
		s.lat = append(s.lat, l...)
	}
	slices.Sort(s.lat)
	s.ops = int64(len(s.lat))
	return s
}

// quantile returns the q-quantile of sorted (nearest rank), or 0.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// median returns the median of v (the mean of the middle two for an even
// count), or 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// rpcCounter counts the unary RPCs sent on the connections it is installed
// on (n), and those still outstanding (out: a client's Record may go on in
// the background past its call).
type rpcCounter struct{ n, out atomic.Int64 }

func (c *rpcCounter) dialOption() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		c.n.Add(1)
		c.out.Add(1)
		defer c.out.Add(-1)
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

// settled waits until no RPC counted is outstanding: a scenario's counts
// then hold no script of a call the one before it left in flight.
func (c *rpcCounter) settled(ctx context.Context) error {
	for c.out.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}
