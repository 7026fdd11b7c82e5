package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis that stalls (a link that forwards nothing, a frozen process,
// replies slower than any decision can wait) never refuses anything: its
// commands just do not come back. So each decision script (Allow, Record)
// is watched on a budget of the daemon's own, Options.DecisionTimeout,
// whatever the caller's: every bound it stays outstanding counts as Redis
// failing once (OutageTimeouts in a row, with no answer from the node
// between, send the node to memory), even when its caller has stopped
// waiting. A caller keeps waiting for a late answer (a loaded Redis is
// slow, not gone) until its node is in an outage, when it is answered
// from memory, or its own deadline ends. Only the decision scripts are
// watched so: List, Events, SCAN and savings reads may take longer and
// keep go-redis's read timeout.

// DefaultDecisionTimeout is the daemon's decision timeout
// (--redis-decision-timeout): far above a decision script's round trip
// on a loaded host (a few milliseconds), and short enough that
// OutageTimeouts of them end well within a second.
const DefaultDecisionTimeout = 300 * time.Millisecond

// LaxDecisionTimeout is Options.DecisionTimeout's zero value: far past
// any decision a loaded host (a -race build, other suites at once) keeps
// waiting, so only a stall reaches it.
const LaxDecisionTimeout = 10 * time.Second

// stalled is the error of a decision script still outstanding when its
// node went to memory, or cut after OutageTimeouts+1 bounds: Redis is
// failing (IsUnavailable), not the caller's deadline.
type stalled struct{ bound time.Duration }

func (e stalled) Error() string {
	return fmt.Sprintf("redis did not answer within the decision timeout (%s)", e.bound)
}

// decided is a decision script's outcome.
type decided struct {
	res []any
	err error
}

// decide runs the decision script sc for name on its node n, watched by
// the daemon's bound (see above) rather than the caller's ctx: the script
// runs on a context that keeps ctx's values but not its end (cut after
// OutageTimeouts+1 bounds, which drops its connection), in a goroutine of
// its own, and a watchdog counts each bound it stays outstanding against
// n. The caller gets the answer; an error once n is in an outage
// (stalled, answered from memory by the caller) or its ctx ends (its
// error); either is a stillQueued whose wait returns once the script has
// ended, since it may still run.
func (s *Store) decide(ctx context.Context, n *node, name string, sc script, keys []string, args []any) ([]any, error) {
	if err := ctx.Err(); err != nil {
		return nil, unsent{err}
	}
	bound := s.o.DecisionTimeout
	out := make(chan decided, 1)
	done := make(chan struct{})
	w := s.watch(n, name, bound)
	var queued func() // a coalesced script left queued when cut
	go func() {
		defer close(done)
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(OutageTimeouts+1)*bound)
		res, err := s.script(bctx, sc, keys, args)
		cut := bctx.Err() != nil
		cancel()
		w.stop()
		if err != nil && cut {
			var q stillQueued
			if errors.As(err, &q) {
				queued = q.wait
			}
			err = stalled{bound} // counted by the watchdog
		} else {
			s.judge(n, name, err) // a late answer, too: the node answers after all
		}
		out <- decided{res, err}
	}()
	wait := func() {
		<-done
		if queued != nil {
			queued()
		}
	}
	select {
	case d := <-out:
		return d.res, d.err
	case <-w.down:
		return nil, stillQueued{err: stalled{bound}, wait: wait}
	case <-ctx.Done():
		return nil, stillQueued{err: ctx.Err(), wait: wait}
	}
}

// watchdog counts the bounds one decision script stays outstanding.
type watchdog struct {
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
	// down is closed once the script's node is in an outage while the
	// script is outstanding.
	down chan struct{}
}

// watch starts the watchdog of a decision script for name on n: each
// bound it is outstanding counts as a failure of n (judge), and down is
// closed once n is in an outage.
func (s *Store) watch(n *node, name string, bound time.Duration) *watchdog {
	w := &watchdog{down: make(chan struct{})}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t = time.AfterFunc(bound, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.stopped {
			return
		}
		s.judge(n, name, stalled{bound})
		if n.down.Load() {
			w.stopped = true
			close(w.down)
			return
		}
		w.t.Reset(bound)
	})
	return w
}

// stop ends the watchdog.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.t.Stop()
}

// judge notes the outcome err of a decision script sent to n for
// breaker name: an answer resets n's count of failures; a connection
// that cannot be made or was lost means an outage of n at once; a stall
// (or a "not now" reply such as LOADING) counts toward one.
func (s *Store) judge(n *node, name string, err error) {
	switch {
	case err == nil:
		n.timeouts.Store(0)
	case s.o.Outage != OutageMemory || !IsUnavailable(err):
	case connectionLost(err) || n.timeouts.Add(1) >= OutageTimeouts:
		s.enterOutage(n, name)
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
