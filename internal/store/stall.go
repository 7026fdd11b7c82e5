package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis that stalls (a link that forwards nothing, a frozen process,
// replies slower than any decision can wait) never refuses anything: its
// commands just do not come back. So each decision script (Allow, Record)
// runs on a budget of the daemon's own, Options.DecisionTimeout, whatever
// the caller's: one still outstanding when it passes counts as Redis
// failing (OutageTimeouts in a row send its node to memory), even when
// its caller has stopped waiting, and no caller waits on it past it.
// Only the decision scripts are bound so: List, Events, SCAN and savings
// reads may take longer and keep go-redis's read timeout.

// DefaultDecisionTimeout is Options.DecisionTimeout's default: far above
// a decision script's round trip on a loaded host (a few milliseconds),
// and short enough that OutageTimeouts of them in a row end well within
// a second.
const DefaultDecisionTimeout = 300 * time.Millisecond

// LaxDecisionTimeout is Options.DecisionTimeout's zero value: far past
// any decision a loaded host (a -race build, other suites at once) keeps
// waiting, so only a stall reaches it.
const LaxDecisionTimeout = 10 * time.Second

// stalled is the error of a decision script still outstanding at the
// daemon's bound: Redis is failing (IsUnavailable), not the caller's
// deadline.
type stalled struct{ bound time.Duration }

func (e stalled) Error() string {
	return fmt.Sprintf("redis did not answer within the decision timeout (%s)", e.bound)
}

// decisionBegunKey is the context key DecisionBegun sets.
type decisionBegunKey struct{}

// DecisionBegun returns ctx marked as a call whose decision began at t,
// before the store was asked for it: the reads the call waits on first
// (the new-breaker quota's Exists) and its decision script then share one
// Options.DecisionTimeout from t, rather than each taking a whole one.
func DecisionBegun(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, decisionBegunKey{}, t)
}

// decisionBound is what is left of the decision timeout for ctx's call
// (DecisionBegun), and never under a tenth of it: a script always gets a
// chance to be answered.
func (s *Store) decisionBound(ctx context.Context) time.Duration {
	bound := s.o.DecisionTimeout
	if t, ok := ctx.Value(decisionBegunKey{}).(time.Time); ok {
		return max(bound-time.Since(t), bound/10)
	}
	return bound
}

// decided is a decision script's outcome.
type decided struct {
	res []any
	err error
}

// decide runs the decision script sc for name on its node n, judged by
// the daemon's bound (see above) rather than the caller's ctx: the
// script runs on a context that keeps ctx's values but not its end, in a
// goroutine of its own, and its outcome (an answer, a failure, or still
// nothing at the bound) is judged exactly once for n. The caller gets the
// answer, or an error when the bound passes first (stalled) or its ctx
// ends (its error); either is a stillQueued whose wait returns once the
// script has ended, since it may still run.
func (s *Store) decide(ctx context.Context, n *node, name string, sc script, keys []string, args []any) ([]any, error) {
	if err := ctx.Err(); err != nil {
		return nil, unsent{err}
	}
	bound := s.decisionBound(ctx)
	seq := n.sent.Add(1)
	var judged atomic.Bool
	judge := func(err error) {
		if judged.CompareAndSwap(false, true) {
			s.judge(n, name, seq, err)
		}
	}
	out := make(chan decided, 1)
	done := make(chan struct{})
	var queued func() // a coalesced script left queued at the bound
	go func() {
		defer close(done)
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
		res, err := s.script(bctx, sc, keys, args)
		if err != nil && bctx.Err() != nil {
			var q stillQueued
			if errors.As(err, &q) {
				queued = q.wait
			}
			err = stalled{bound}
		}
		cancel()
		judge(err)
		out <- decided{res, err}
	}()
	wait := func() {
		<-done
		if queued != nil {
			queued()
		}
	}
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case d := <-out:
		return d.res, d.err
	case <-t.C:
		judge(stalled{bound})
		return nil, stillQueued{err: stalled{bound}, wait: wait}
	case <-ctx.Done():
		return nil, stillQueued{err: ctx.Err(), wait: wait}
	}
}

// judge notes the outcome err of the decision script sent seq-th to n
// for breaker name: an answer resets n's count of failures unless a
// later-sent decision already failed; a connection that cannot be made
// or was lost means an outage of n at once; a stall (or a "not now"
// reply such as LOADING) counts toward one.
func (s *Store) judge(n *node, name string, seq int64, err error) {
	switch {
	case err == nil:
		if seq > n.failedAt.Load() {
			n.timeouts.Store(0)
		}
	case s.o.Outage != OutageMemory || !IsUnavailable(err):
	default:
		for f := n.failedAt.Load(); seq > f && !n.failedAt.CompareAndSwap(f, seq); f = n.failedAt.Load() {
		}
		if connectionLost(err) || n.timeouts.Add(1) >= OutageTimeouts {
			s.enterOutage(n, name)
		}
	}
}

// checkFailed notes a health check (Check) that Redis could not serve:
// on a single Redis, whose one node every decision goes to, it is an
// outage at once (a check is bounded by a whole health interval, far past
// any decision's bound). On a Cluster the check asks every node at once
// and cannot say which failed: each node is judged by its calls.
func (s *Store) checkFailed(err error) {
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster || s.o.Outage != OutageMemory || !IsUnavailable(err) {
		return
	}
	s.enterOutage(s.nodeOf(context.Background(), ""), "")
}

// inMemory reports whether a decision for n that failed with err (and
// was judged) is to be answered from memory: n is in an outage, err says
// Redis could not serve it, and the caller still waits.
func (s *Store) inMemory(ctx context.Context, n *node, err error) bool {
	return s.o.Outage == OutageMemory && ctx.Err() == nil && n.down.Load() && IsUnavailable(err)
}

// probeClient returns a client of its own to the node the client c
// reaches, for the recovery poll: one connection, no retry, every
// command bounded by its context. The poll then never waits behind the
// connections stuck on a stalled node (which go-redis keeps until its
// read timeout), and a node that answers again is seen on a fresh
// connection, as the next decisions will reach it. Close it when done.
func probeClient(c *redis.Client) *redis.Client {
	o := *c.Options()
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxConcurrentDials = 1, 0, 1, 0
	o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled = -1, 1, true
	return redis.NewClient(&o)
}
