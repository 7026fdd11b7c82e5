package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Fast mode (client.WithFastMode) scenarios: the same tool calls through
// fast clients, whose views answer Allow in-process and which send no
// success on a healthy breaker. Each scenario's build makes every fast
// client learn every breaker it will call first (untimed: the warm-up is
// excluded from the steady-state counts).

// fastPoll is how long a fast poller sleeps between two in-process
// Allows in the propagation scenario, so that pollers do not take the
// cores the daemons need.
const fastPoll = 100 * time.Microsecond

// learn makes every fast client of t know each breaker pick yields: one
// Allow (an RPC the first time), then waits until the answer comes from
// the view.
func (t *target) learn(ctx context.Context, names []string) error {
	if t.twin {
		return nil // the wire pass's twin: its fast rows are not reported
	}
	return learnAll(ctx, t.fast, names)
}

// learnAll makes every fast client in cs know each of names (one Allow,
// an RPC the first time), waiting until the answer comes from its view.
func learnAll(ctx context.Context, cs []*client.Client, names []string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, cl := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, n := range names {
				for {
					p, err := cl.Allow(ctx, n)
					if err != nil {
						errs[i] = fmt.Errorf("learn %s: %w", n, err)
						return
					}
					if p.Cached {
						break
					}
					select {
					case <-ctx.Done():
						errs[i] = fmt.Errorf("learn %s: the fast view never answered it", n)
						return
					case <-time.After(time.Millisecond):
					}
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// names returns every breaker pk yields for o (the spread's o.Breakers or
// the one hot breaker).
func (t *target) names(pk picker, o Options) []string {
	pick := pk(o)
	seen := map[string]bool{}
	var out []string
	for i := 0; i < o.Breakers; i++ {
		n := t.breaker(pick(0, i))
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

func fastAllow(pk picker) func(context.Context, *target, Options) (opFunc, error) {
	return func(ctx context.Context, t *target, o Options) (opFunc, error) {
		if err := t.learn(ctx, t.names(pk, o)); err != nil {
			return nil, err
		}
		return allowThrough(t, t.fast, pk(o)), nil
	}
}

func fastPair(pk picker) func(context.Context, *target, Options) (opFunc, error) {
	return func(ctx context.Context, t *target, o Options) (opFunc, error) {
		if err := t.learn(ctx, t.names(pk, o)); err != nil {
			return nil, err
		}
		pick := pk(o)
		return func(ctx context.Context, c, i int) error {
			return t.fast[c%workers].Call(ctx, t.breaker(pick(c, i)), func(context.Context) error { return nil })
		}, nil
	}
}

func fastScenarios() []scenario {
	return []scenario{
		{"allow-1k-fast", "Allows", ServeDaemon, fastAllow(spread), 0, nil},
		{"pair-1k-fast", "Calls", ServeDaemon, fastPair(spread), 0, nil},
		{"pair-hot-fast", "Calls", ServeDaemon, fastPair(hot), 0, nil},
	}
}

// stormResult is one failure storm through fast clients.
type stormResult struct {
	calls, failing, cmds, batches int64
	breakers                      int
}

// storm runs a failure storm through the fast clients of daemon A: every
// call fails (SERVER_ERROR) until its client's view denies it, on n
// fresh breakers, o.Callers callers each cycling over all of them until
// it has been denied on every one. It counts the tool calls (made and
// denied) and the Redis commands (INFO commandstats) from the first call
// until every outcome was sent.
func (e *env) storm(ctx context.Context, o Options, round, n int) (stormResult, error) {
	t := e.main
	names := make([]string, n)
	for k := range names {
		names[k] = t.breaker(fmt.Sprintf("storm-%d-%d", round, k))
	}
	if err := t.learn(ctx, names); err != nil { // closed, as a fleet would know them
		return stormResult{}, err
	}
	batches := int64(0)
	for _, cl := range t.fast {
		batches -= cl.Stats().Batches
	}
	before, _, err := commandCalls(ctx, e.rdb)
	if err != nil {
		return stormResult{}, err
	}
	within := settle(ctx, 20*time.Second)
	sctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var calls, failing atomic.Int64
	var wg sync.WaitGroup
	fail := func(context.Context) error {
		return &client.OutcomeError{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: "HTTP 503"}
	}
	for c := 0; c < o.Callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := t.fast[c%workers]
			denied := make([]bool, n)
			left := n
			for i := 0; left > 0 && sctx.Err() == nil; i++ {
				k := (c + i) % n
				if denied[k] {
					continue
				}
				calls.Add(1)
				ran := false
				err := cl.Call(sctx, names[k], func(ctx context.Context) error { ran = true; return fail(ctx) })
				if ran {
					failing.Add(1)
				}
				if _, ok := client.AsDenial(err, names[k]); ok {
					denied[k] = true
					left--
				}
			}
		}()
	}
	wg.Wait()
	if err := sctx.Err(); err != nil {
		return stormResult{}, fmt.Errorf("storm: not every breaker denied every caller within %s: %w", within.Round(time.Second), err)
	}
	for _, cl := range t.fast {
		if err := cl.Flush(ctx); err != nil {
			return stormResult{}, err
		}
		batches += cl.Stats().Batches
	}
	after, _, err := commandCalls(ctx, e.rdb)
	if err != nil {
		return stormResult{}, err
	}
	return stormResult{calls: calls.Load(), failing: failing.Load(), cmds: after - before, batches: batches, breakers: n}, nil
}

// fastTrip is one trip's propagation to fast clients: how long until
// every poller's view denied, and how long after the tripping Record was
// sent the last poller was still allowed (the staleness observed).
type fastTrip struct {
	propagation, stale time.Duration
	lateAllows         int64 // allows after the trip's Record came back
}

// fastPropagation is propagation for fast clients on daemon B: each
// polls its in-process Allow every fastPoll until its view denies.
func (e *env) fastPropagation(ctx context.Context, o Options, round int) ([]fastTrip, error) {
	pollers := make([]*client.Client, o.Pollers)
	for p := range pollers {
		conn, err := e.dial(e.daemonB)
		if err != nil {
			return nil, err
		}
		pollers[p] = client.New(conn, clientOptions(fmt.Sprintf("bench-fast-poller-%d", p), client.WithFastMode())...)
	}
	defer func() {
		for _, p := range pollers {
			_ = p.Close()
		}
	}()
	var out []fastTrip
	for k := 0; k < o.Trips; k++ {
		name := e.main.breaker(fmt.Sprintf("fast-trip-%d-%d", round, k))
		ft, err := e.fastTripOnce(ctx, pollers, name)
		if err != nil {
			return nil, err
		}
		out = append(out, ft)
	}
	return out, nil
}

func (e *env) fastTripOnce(ctx context.Context, pollers []*client.Client, name string) (fastTrip, error) {
	// Every poller knows the breaker closed, from its view.
	for _, cl := range pollers {
		deadline := time.Now().Add(settle(ctx, tripWait))
		for {
			p, err := cl.Allow(ctx, name)
			if err != nil {
				return fastTrip{}, err
			}
			if p.Cached && p.Allowed() {
				break
			}
			if time.Now().After(deadline) {
				return fastTrip{}, fmt.Errorf("fast trip %s: a poller's view never learned it", name)
			}
			time.Sleep(time.Millisecond)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, settle(ctx, tripWait))
	defer cancel()
	denied := make([]time.Time, len(pollers))
	lastAllowed := make([]time.Time, len(pollers))
	errs := make([]error, len(pollers))
	var wg sync.WaitGroup
	var tripped atomic.Pointer[time.Time]
	var late atomic.Int64
	for p, cl := range pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pctx.Err() == nil {
				perm, err := cl.Allow(pctx, name)
				now := time.Now()
				if err != nil {
					errs[p] = err
					return
				}
				if !perm.Allowed() {
					denied[p] = now
					return
				}
				lastAllowed[p] = now
				if tr := tripped.Load(); tr != nil && now.After(*tr) {
					late.Add(1)
				}
				time.Sleep(fastPoll)
			}
			errs[p] = pctx.Err()
		}()
	}
	t0, back, err := e.tripOnA(pctx, name)
	if err != nil {
		cancel()
		wg.Wait()
		return fastTrip{}, fmt.Errorf("fast trip %s: %w", name, err)
	}
	tripped.Store(&back)
	wg.Wait()
	var ft fastTrip
	for p := range pollers {
		if errs[p] != nil {
			return fastTrip{}, fmt.Errorf("fast trip %s: poller %d: %w", name, p, errs[p])
		}
		if denied[p].IsZero() {
			return fastTrip{}, errors.New("fast trip: a poller never denied")
		}
		ft.propagation = max(ft.propagation, denied[p].Sub(t0))
		if lastAllowed[p].After(t0) {
			ft.stale = max(ft.stale, lastAllowed[p].Sub(t0))
		}
	}
	ft.lateAllows = late.Load()
	return ft, nil
}

// fastReport prints the fast-mode measurements that are not rows of the
// table: propagation to fast views, staleness, and the failure storm.
func fastReport(w io.Writer, o Options, rows map[string]row, trips []fastTrip, storms []stormResult) {
	fast := len(trips) > 0 || len(storms) > 0
	for _, name := range []string{"allow-1k-fast", "pair-1k-fast", "pair-hot-fast"} {
		_, ok := rows[name]
		fast = fast || ok
	}
	if !fast { // --only chose no fast-mode scenario: no heading over nothing
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "fast mode (client.WithFastMode): in-process Allow latency, Redis and RPC cost of healthy calls, trip propagation, staleness, a failure storm:")
	if r, ok := rows["allow-1k-fast"]; ok {
		fmt.Fprintf(w, "  allow-1k-fast: in-process Allow p50 %s µs, p99 %s µs\n", us(r.p50, true), us(r.p99, true))
	}
	for _, name := range []string{"pair-1k-fast", "pair-hot-fast"} {
		if r, ok := rows[name]; ok {
			fmt.Fprintf(w, "  %s: %.2f Redis commands per 1,000 healthy calls in steady state (target <= 5: %s), %.3f RPCs per call\n",
				name, r.cmdsPerOp*1000, verdict(r.cmdsPerOp*1000 <= 5), r.rpcsPerOp)
		}
	}
	if len(trips) > 0 {
		var prop, stale []time.Duration
		var late int64
		for _, t := range trips {
			prop, stale = append(prop, t.propagation), append(stale, t.stale)
			late += t.lateAllows
		}
		slices.Sort(prop)
		slices.Sort(stale)
		fmt.Fprintf(w, "  trip-to-fast-view: %d trips on daemon A seen by %d fast clients on daemon B: p50 %s ms, p99 %s ms (target p99 <= 10 ms: %s)\n",
			len(prop), o.Pollers, ms(quantile(prop, 0.5)), ms(quantile(prop, 0.99)), verdict(quantile(prop, 0.99) <= 10*time.Millisecond))
		fmt.Fprintf(w, "  staleness: the last Allow a fast client still answered ALLOWED came p50 %s ms, max %s ms after the tripping Record was sent;\n",
			ms(quantile(stale, 0.5)), ms(stale[len(stale)-1]))
		fmt.Fprintf(w, "    %d Allows in all were answered ALLOWED after that Record had come back (pollers every %s)\n", late, fastPoll)
	}
	if len(storms) > 0 {
		var s stormResult
		for _, x := range storms {
			s.calls += x.calls
			s.failing += x.failing
			s.cmds += x.cmds
			s.batches += x.batches
			s.breakers += x.breakers
		}
		per := 0.0
		if s.calls > 0 {
			per = float64(s.cmds) * 1000 / float64(s.calls)
		}
		fmt.Fprintf(w, "  failure storm: %d breakers, %d callers failing every call until denied: %d tool calls (%d made and failed), %d Redis commands = %.0f per 1,000 calls, %d RecordBatch calls\n",
			s.breakers, o.Callers, s.calls, s.failing, s.cmds, per, s.batches)
	}
}
