package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/breakerd/breakerd/internal/breaker"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// openCache holds the denials this client knows to be current, so that an
// Allow on a circuit known to be open costs no round trip until its
// retry_after. Only denials are cached, and only while the Watch stream is
// live: any event for a breaker drops its entry, and a resync (on every
// (re)connect of the stream) replaces the whole set with List's. A denial
// whose Allow raced an event is not stored (the epoch check). While the
// stream is broken no new denial is stored; the entries held keep
// answering (they are breakerd's last word) until their retry_after or the
// next resync, marked Degraded once the stream has been silent past its
// limit, and not past the stale bound (Client.hearing). The cache only ever denies: it never allows what breakerd
// would deny. It is safe for concurrent use.
type openCache struct {
	mu    sync.Mutex
	live  bool
	syncs int    // resyncs so far
	epoch uint64 // bumped by every event, resync and stream break
	m     map[string]cached
}

type cached struct {
	decision pb.Decision
	denial   *pb.Denial // breakerd's, on this client's clock
	until    time.Time  // zero: until an event says otherwise (a force with no end)
	state    *pb.BreakerState
	// worker is the one worker a suspect denial answers (the cache is
	// shared by the workers of one connection, ForWorker); "" for all.
	worker string
}

func newOpenCache() *openCache { return &openCache{m: map[string]cached{}} }

// lookup returns the cached denial of breaker for worker, or nil.
// hearing (Client.hearing) says how the stream stands: a denial is marked
// Degraded once the stream has been silent past its limit, and none is
// answered past the stale bound.
func (c *openCache) lookup(breaker, worker string, now time.Time, hearing func(live bool, now time.Time) (degraded, unheard bool)) *Permit {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[breaker]
	if !ok || e.worker != "" && e.worker != worker {
		return nil
	}
	degraded, unheard := hearing(c.live, now)
	if unheard {
		return nil
	}
	if !e.until.IsZero() && !now.Before(e.until) {
		delete(c.m, breaker)
		return nil
	}
	var retry time.Duration
	if !e.until.IsZero() {
		retry = wholeMs(e.until.Sub(now))
	}
	return &Permit{Breaker: breaker, Decision: e.decision, RetryAfter: retry, Reason: e.denial.GetReason(),
		Denial: e.denial, State: e.state, Cached: true, Degraded: degraded, at: now}
}

// begin returns the epoch to hand back to store after the Allow it guards.
func (c *openCache) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

// store caches p, answered to worker, if it is a denial, the stream is
// live and nothing happened since begin returned epoch.
func (c *openCache) store(p *Permit, worker string, epoch uint64, now time.Time) {
	if p.Allowed() || p.Degraded || p.Decision == pb.Decision_DECISION_DENIED_PARENT_OPEN || p.Denial == nil {
		// (A parent's denial is the parent's state: an event about the
		// parent would not drop it here. Asked again every time.)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live || c.epoch != epoch {
		return
	}
	e := cached{decision: p.Decision, denial: p.Denial, state: p.State}
	if p.Decision == pb.Decision_DECISION_DENIED_SUSPECT_WORKER {
		e.worker = worker
	}
	switch {
	case p.RetryAfter > 0:
		e.until = now.Add(p.RetryAfter)
	case p.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN:
		return // nothing to wait for: ask again
	}
	c.m[p.Breaker] = e
}

// event drops the breaker's entry (its state moved), or, when the event
// carries the state read after it, replaces the entry by what that state
// denies (denialOf).
func (c *openCache) event(e *pb.Event, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	delete(c.m, e.GetBreaker())
	if st := e.GetState(); st != nil && c.live {
		if d, ok := denialOf(st, now); ok {
			c.m[e.GetBreaker()] = d
		}
	}
}

// broken marks the stream down: nothing is stored until the next resync
// replaces the set. The entries stay: they are what breakerd said last,
// and a timed one ends by itself at the retry_after breakerd gave.
func (c *openCache) broken() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.live = false
}

// resync replaces the set with the open and forced-open breakers List
// returned, read while the stream was already subscribed.
func (c *openCache) resync(states []*pb.BreakerState, now time.Time) {
	m := map[string]cached{}
	for _, s := range states {
		if d, ok := denialOf(s, now); ok {
			m[s.GetBreaker()] = d
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.syncs++
	c.live = true
	c.m = m
}

// denialOf is the entry for what a snapshot denies any worker but the
// suspect, by the machine's read rule (breaker.View.Verdict), with the
// snapshot's denial (breakerd's words), its end moved onto this client's
// clock (now is when the snapshot arrived); false when it denies nothing,
// when the next Allow would move the breaker (a probe is due), or when
// the snapshot carries no denial to word it. A parent's denial is not
// cached (store says why).
func denialOf(st *pb.BreakerState, now time.Time) (cached, bool) {
	v, policyShadow := breaker.ViewOfProto(st)
	vd := v.Verdict(breaker.Query{Now: max(v.Now, 1), PolicyShadow: policyShadow})
	d := st.GetDenial()
	if !vd.Holds() || d.GetDecision() != vd.Decision {
		return cached{}, false
	}
	e := cached{decision: vd.Decision, denial: onClientClock(d, st.GetAsOfMs(), now), state: st}
	if vd.Until != breaker.Forever {
		e.until = now.Add(time.Duration(vd.Until-v.Now) * time.Millisecond)
	}
	return e, true
}

// status returns whether the stream is live, how many resyncs have run
// and the epoch.
func (c *openCache) status() (live bool, syncs int, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live, c.syncs, c.epoch
}

// watch keeps the cache in step with breakerd until ctx ends: subscribe,
// resync from List once the subscription is live, drop entries on each
// event; on any break, mark the cache broken and start again after retry.
func (c *Client) watch(ctx context.Context, retry time.Duration) {
	c.rewatch(ctx, retry, c.watchOnce, c.cache.broken, "client: watch stream ended; retrying")
}

// rewatch runs once until ctx ends: after each end of the stream it calls
// broken, logs msg with the stream's error (once until the stream is
// heard again), and waits retry before the next try. The open-circuit cache and the fast view share it.
func (c *Client) rewatch(ctx context.Context, retry time.Duration, once func(context.Context) error, broken func(), msg string) {
	said := int64(-1) // c.heard when the last break was logged: one line per outage, not per retry
	for ctx.Err() == nil {
		err := once(ctx)
		broken()
		if ctx.Err() != nil {
			return
		}
		c.stats.watchBreaks.Add(1)
		if err != nil {
			e := err.Error()
			c.stats.lastWatchErr.Store(&e)
		}
		if h := c.heard.Load(); h != said {
			said = h
			c.log(msg, err)
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// subscribed waits until breakerd has sent a Watch stream's headers,
// which it does once the subscription is live. A stream refused or ended
// before that has none: grpc's Header then answers nil, nil and keeps the
// status for Recv, which subscribed returns (a refusal must not read as a
// live stream, even for a moment).
func subscribed(stream pb.BreakerService_WatchClient) error {
	md, err := stream.Header()
	if err != nil {
		return err
	}
	if md == nil {
		if _, err := stream.Recv(); err != nil {
			return err
		}
		return errors.New("client: the Watch stream sent an event before its headers")
	}
	return nil
}

// listPageSize is how many breakers' keys one page of the fast-mode
// view's List scans (the daemon's most).
const listPageSize = 1000

// listOpen lists the open and forced-open breakers a page at a time (the
// daemon refuses an unpaged List past its cap). The list timeout bounds
// each page, not the whole listing: a keyspace of many breakers takes many
// pages, and a listing that makes progress must not be cut off and started
// again.
func (c *Client) listOpen(ctx context.Context) ([]*pb.BreakerState, error) {
	req := &pb.ListRequest{States: []pb.State{pb.State_STATE_OPEN, pb.State_STATE_FORCED_OPEN}, PageSize: listPageSize}
	return ListEvery(ctx, c.api, req, c.o.listTimeout)
}

func (c *Client) watchOnce(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, recvErr, err := c.watchStream(ctx, &pb.WatchRequest{})
	if err != nil {
		return err
	}
	open, err := c.listOpen(ctx)
	if err != nil {
		return err
	}
	c.heard.Store(c.o.clock.Now().UnixNano())
	c.cache.resync(open, c.o.clock.Now())
	for e := range events {
		now := c.o.clock.Now()
		c.cache.event(e, now)
		c.known.event(e, now)
	}
	return <-recvErr
}
