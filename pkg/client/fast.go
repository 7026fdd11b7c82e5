package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/limits"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Fast mode (WithFastMode): the client keeps a view of every breaker it
// uses, pushed by breakerd's Watch stream (transitions, Forces and the
// run notices record.lua publishes), so that:
//
//   - Allow on a closed circuit, or on one known to deny (open until its
//     probe is due, forced open, paused, a probe in flight), is answered
//     in-process with no RPC. A half-open breaker whose probe is due, a
//     breaker the view does not know, and every Allow of a closed breaker
//     while the stream is down go to breakerd as in strict mode: the probe
//     lease is always taken in Redis, so the fleet still gets one probe.
//     A stream silent for 3 heartbeats is dropped (watchStream); the
//     view's denials then age out (Client.hearing).
//   - Record queues the outcome and returns; a sender goroutine sends the
//     queue in coalesced RecordBatch calls. Each outcome carries the
//     ticket of its Allow, so breakerd still fences stale ones.
//   - A SUCCESS on a breaker the view shows closed with no failure run in
//     progress is not sent at all (Stats.SuccessesSkipped): it would
//     change nothing in Redis. The view learns that a run started from
//     the run_started notice within milliseconds, and this client's own
//     failures mark the run at once.
//   - The queue is bounded for successes only: past FastQueueLimit queued
//     outcomes a success is dropped (Stats.SuccessesDropped), never a
//     failure or a probe outcome, and Record never blocks.
//
// A breaker with a parent scope (BreakerState.parent) is never answered
// from the view: its Allow always goes to breakerd, which judges the
// parent's verdict, and none of its successes is skipped (one may end
// the parent's failure run). Its outcomes are still queued and batched.
//
// What a fast client gives up: between a trip on Redis and its Watch
// event reaching this client (milliseconds; measured in
// docs/performance.md) it may still allow calls, and a success it skips
// in that window could have reset a failure run another worker had just
// started. The quorum, the single probe, generations and forced states
// are decided in Redis as always.

// FastQueueLimit bounds the outcomes a fast-mode client holds unsent
// before it drops successes (failures and probe outcomes are always
// kept: the trip they lead to bounds them).
const FastQueueLimit = 4096

// entry is the view of one breaker at the moment it was learned: the
// snapshot breakerd gave (or an event told), which the machine's read
// rule (breaker.View.Verdict) judges at each Allow, and the offset that
// moves the client's clock onto the Redis clock the snapshot's times are
// on. Entries are immutable: an update stores a new one.
type entry struct {
	v breaker.View
	// policyShadow is the policy's shadow field as the snapshot shows it
	// (breaker.ViewOfProto).
	policyShadow bool
	// skew is the client's clock minus the Redis clock when the entry was
	// learned (from when the request was sent, so that a late answer never
	// stretches a denial past breakerd's end; it may end early, and then
	// breakerd decides).
	skew  time.Duration
	state pb.State // the state as the API shows it (closed when shadowed)
	gen   int64
	// run: a success would change the breaker (breaker.State.RunOpen).
	run bool
	// window: the breaker counts in window mode, where every success
	// moves the failure rate: none is skipped.
	window bool
	// slowMs: the policy's slow_call, ms (0: none); a success that took
	// longer is a slow call, which breakerd must count: never skipped.
	slowMs int64
	st     *pb.BreakerState // breakerd's last snapshot, for Permit.State
	// child: the breaker has a parent scope (BreakerState.parent), whose
	// state the view does not follow: every Allow on it goes to breakerd
	// (which judges the parent's verdict) and no success is skipped (it
	// may end the parent's failure run).
	child bool
	// allowed is the permit every ALLOWED answer from this entry returns
	// (read-only, shared: an Allow served from the view allocates nothing).
	allowed *Permit
}

// newEntry returns the entry for breakerd's snapshot s of name, learned
// at now on the client's clock.
func newEntry(name string, s *pb.BreakerState, now time.Time) *entry {
	v, policyShadow := breaker.ViewOfProto(s)
	e := &entry{v: v, policyShadow: policyShadow, skew: now.Sub(time.UnixMilli(s.GetAsOfMs())), state: s.GetState(),
		gen: s.GetGeneration(), window: s.GetWindowMode(), slowMs: s.GetSlowCallMs(), child: s.GetParent() != "", st: s}
	if e.state == pb.State_STATE_UNSPECIFIED {
		e.state = pb.State_STATE_CLOSED
	}
	if v.State == string(breaker.Closed) {
		// Outcomes count only while the (shadow) state is closed: a run.
		e.run = v.Fails > 0 || v.Slow > 0 || v.Suspect != ""
	}
	e.allowed = &Permit{Breaker: name, Decision: pb.Decision_DECISION_ALLOWED, Ticket: &pb.Ticket{Generation: e.gen},
		State: s, Cached: true}
	return e
}

// redisMs is the client's time t on the Redis clock, ms since the epoch.
func (e *entry) redisMs(t time.Time) int64 { return t.Add(-e.skew).UnixMilli() }

// clientTime is a Redis-clock time ms on the client's clock.
func (e *entry) clientTime(ms int64) time.Time { return time.UnixMilli(ms).Add(e.skew) }

// view is the fast-mode view: entries read without a lock on the Allow
// path; writes (events, resyncs, answers) serialized by mu.
type view struct {
	entries sync.Map // name -> *entry
	live    atomic.Bool
	syncs   atomic.Int64 // resyncs completed

	mu sync.Mutex
	// ver is bumped by every event about a name hashing to the slot, so a
	// learn that raced it is dropped; fixed-size, so that events about
	// breakers this client never uses cost no memory (a shared slot only
	// drops a learn now and then: the next Allow asks again).
	ver [4096]uint64
	all uint64 // bumped by every resync and stream break
}

func newView() *view { return &view{} }

// slot is name's index in ver (FNV-1a).
func slot(name string) int {
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h ^= uint32(name[i])
		h *= 16777619
	}
	return int(h % 4096)
}

func (v *view) get(name string) *entry {
	e, ok := v.entries.Load(name)
	if !ok {
		return nil
	}
	return e.(*entry)
}

// stamp returns the version to hand back to learn after an RPC about name.
func (v *view) stamp(name string) (uint64, uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.ver[slot(name)], v.all
}

// learn stores e for name if nothing about name was heard since stamp,
// and reports whether the view now knows name: it does when e was stored
// or when an event that fenced e left an entry of its own.
func (v *view) learn(name string, e *entry, ver, all uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	old, ok := v.entries.Load(name)
	if v.ver[slot(name)] != ver || v.all != all {
		return ok
	}
	if ok && newer(old.(*entry), e) {
		return true // an answer read before what the view holds: keep the later word
	}
	v.entries.Store(name, e)
	return true
}

// newer reports whether old says more than e about the breaker: read
// later on the Redis clock, or at the same millisecond but at a later
// generation (a generation only grows while the breaker holds state; a
// breaker whose keys expired starts again at 0, read later).
func newer(old, e *entry) bool {
	a, b := old.st.GetAsOfMs(), e.st.GetAsOfMs()
	return a > b || a == b && old.gen > e.gen
}

// set stores e for name (from an event) and bumps its version.
func (v *view) set(name string, e *entry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ver[slot(name)]++
	if e == nil {
		v.entries.Delete(name)
		return
	}
	v.entries.Store(name, e)
}

// update applies fn to name's entry under the write lock.
func (v *view) update(name string, fn func(old *entry) *entry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ver[slot(name)]++
	var old *entry
	if e, ok := v.entries.Load(name); ok {
		old = e.(*entry)
	}
	if e := fn(old); e != nil {
		v.entries.Store(name, e)
	} else {
		v.entries.Delete(name)
	}
}

func (v *view) names() []string {
	var out []string
	v.entries.Range(func(k, _ any) bool { out = append(out, k.(string)); return true })
	return out
}

// entryOf turns breakerd's snapshot of a breaker, and the decision it
// answered with its retry_after, into an entry learned at now (when the
// request was sent). A probe lease in flight is held as a denial only
// when breakerd denied this worker for it (DENIED_PROBE_IN_FLIGHT, whose
// retry_after tells the lease's end when the snapshot does not): a lease
// released early (a cancelled or panicking probe) emits no event, so a
// lease seen in any other answer, this worker's own PROBE included, is
// left for breakerd to judge.
func entryOf(s *pb.BreakerState, d pb.Decision, retry time.Duration, now time.Time) *entry {
	e := newEntry(s.GetBreaker(), s, now)
	switch {
	case d != pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT:
		e.v.InFlight, e.v.LeaseUntil = false, 0
	case retry > 0 && e.v.LeaseUntil == 0:
		e.v.LeaseUntil = s.GetAsOfMs() + retry.Milliseconds()
	}
	return e
}

// fastAllow answers from the view what the machine's read rule says the
// next Allow would answer, or returns nil when breakerd must be asked: a
// breaker the view does not know or with a parent, an answer only
// breakerd can give (a probe due, breaker.Verdict.Due), or a closed
// breaker while the stream is down (a denial is breakerd's last word and
// stands until its time, marked Degraded once the stream has been silent
// past its limit and not past the stale bound: Client.hearing).
func (c *Client) fastAllow(name string) *Permit {
	e := c.view.get(name)
	if e == nil || e.child {
		return nil
	}
	now := c.o.clock.Now()
	vd := e.v.Verdict(breaker.Query{Worker: c.worker(), Now: e.redisMs(now), PolicyShadow: e.policyShadow})
	switch {
	case vd.Due:
		return nil
	case vd.Denied():
		// A view that no longer hears its stream answers its denials as
		// degraded, and only within the stale bound (c.unheard).
		degraded, unheard := c.hearing(c.view.live.Load(), now)
		if unheard {
			return nil
		}
		var retry time.Duration
		if vd.RetryAfter(e.redisMs(now)) > 0 {
			retry = wholeMs(e.clientTime(vd.Until).Sub(now))
		}
		d := e.denial(vd.Decision, c.worker())
		if d == nil {
			return nil // breakerd's words are not at hand: it answers
		}
		return &Permit{Breaker: name, Decision: vd.Decision, RetryAfter: retry, Reason: d.GetReason(), Denial: d,
			State: e.st, Cached: true, Degraded: degraded, at: now}
	case !c.view.live.Load():
		return nil
	case vd.Shadow == pb.Decision_DECISION_UNSPECIFIED:
		return e.allowed
	}
	// Shadow mode: enforced mode's answer goes with the ticket, as
	// breakerd's would (a denial marks it shadow_denied).
	return &Permit{Breaker: name, Decision: pb.Decision_DECISION_ALLOWED, ShadowDecision: vd.Shadow,
		Ticket: &pb.Ticket{Generation: e.gen, ShadowDenied: breaker.ShadowDenied(vd.Shadow)}, State: e.st, Cached: true}
}

// denial is breakerd's denial d for worker that the entry's snapshot
// carries (its own, or the suspect's when worker is the suspect), its
// times on this client's clock; nil when the snapshot carries none for d.
func (e *entry) denial(d pb.Decision, worker string) *pb.Denial {
	den := e.st.GetDenial()
	if s := e.st.GetSuspectDenial(); s != nil && e.st.GetSuspectWorker() == worker {
		den = s
	}
	if den.GetDecision() != d {
		return nil
	}
	return onClientClock(den, e.st.GetAsOfMs(), e.clientTime(e.st.GetAsOfMs()))
}

// learn stores e for name in the view unless an event fenced it. A fenced
// learn on a breaker the view did not hold yet leaves the view knowing
// nothing of it: the event was about a breaker it did not use, so it was
// not applied, and the answer is older than it. The view then reads the
// breaker again in the background, so it converges without waiting for
// the next Allow to ask.
func (c *Client) learn(name string, e *entry, ver, all uint64) {
	if !c.view.learn(name, e, ver, all) {
		c.goRefresh(name)
	}
}

// fastLearn stores what breakerd answered an Allow in the view, unless an
// event about the breaker arrived meanwhile.
func (c *Client) fastLearn(p *Permit, ver, all uint64, sent time.Time) {
	if p.Degraded || p.DaemonDegraded || p.State == nil {
		return
	}
	c.learn(p.Breaker, entryOf(p.State, p.Decision, p.RetryAfter, sent), ver, all)
}

// onEvent applies one Watch event to the view. The view holds only the
// breakers this client has asked about: an event about any other only
// fences a learn in flight. (onEvent runs on the watch goroutine only, so
// reading an entry and then setting it cannot race another event.)
func (c *Client) onEvent(e *pb.Event) {
	name := e.GetBreaker()
	if c.view.get(name) != nil {
		c.known.event(e, c.o.clock.Now())
	}
	switch e.GetKind() {
	case pb.EventKind_EVENT_KIND_RUN_STARTED, pb.EventKind_EVENT_KIND_RUN_ENDED:
		c.onRunNotice(name, e)
		return
	case pb.EventKind_EVENT_KIND_TRANSITION, pb.EventKind_EVENT_KIND_FORCED:
		to := e.GetTo()
		if e.GetShadow() || e.GetKind() == pb.EventKind_EVENT_KIND_FORCED && (to == pb.State_STATE_OPEN || to == pb.State_STATE_HALF_OPEN) {
			// A shadowed breaker's event says what would have happened,
			// not what is enforced (a shadow trip must not make the view
			// deny); an operator's shadow setting that enforces an open
			// or half-open breaker leaves its timing in the snapshot.
			// Either way: forget it, so its next Allow learns it whole.
			c.view.set(name, nil)
			return
		}
	default:
		// Alerts (suspect, credential, quota, stuck, lapses) move fields
		// the view does not follow event by event: forget the breaker, so
		// its next Allow asks breakerd and learns it whole.
		c.view.set(name, nil)
		return
	}
	old := c.view.get(name)
	if old == nil {
		c.view.set(name, nil) // not a breaker this client uses: only fence a learn in flight
		return
	}
	if at := e.GetAtMs(); at > 0 && at <= old.st.GetAsOfMs() && old.gen >= e.GetGeneration() {
		// A late event: the view learned this transition, or a later one,
		// from an answer read after it. Applied now, it would restart an
		// open period on the client's clock (or undo the later state).
		// It still fences an answer in flight, which is older still.
		c.view.set(name, old)
		return
	}
	n := eventEntry(name, e, old, c.o.clock.Now())
	c.view.set(name, n)
	if n != nil && (n.state == pb.State_STATE_FORCED_OPEN || n.state == pb.State_STATE_PAUSED) {
		// Denied until an event says otherwise; the end (a force TTL, the
		// pause's) is in the snapshot: fetch it, since it lapses only when
		// a script runs and a fast client would otherwise never run one.
		c.goRefresh(name)
	}
}

// onRunNotice applies a run notice: a closed breaker's success now does
// (run_started) or does not (run_ended) change it.
func (c *Client) onRunNotice(name string, e *pb.Event) {
	run := e.GetKind() == pb.EventKind_EVENT_KIND_RUN_STARTED
	c.view.update(name, func(old *entry) *entry {
		if old == nil || old.gen > e.GetGeneration() {
			return old // not a breaker this client uses; or a later transition already told more
		}
		if old.gen == e.GetGeneration() && old.state == pb.State_STATE_CLOSED {
			cp := *old
			cp.run = run
			if !run {
				cp.v.Suspect, cp.v.SuspectUntil = "", 0 // a success clears the suspect
			}
			return &cp
		}
		n := *old
		n.v = breaker.View{State: string(breaker.Closed), Gen: e.GetGeneration(), Shadow: old.v.Shadow, Now: e.GetAtMs()}
		n.state, n.gen, n.run = pb.State_STATE_CLOSED, e.GetGeneration(), run
		n.allowed = &Permit{Breaker: name, Decision: pb.Decision_DECISION_ALLOWED,
			Ticket: &pb.Ticket{Generation: n.gen}, State: old.st, Cached: true}
		return &n
	})
}

// eventEntry is the entry a transition or Force event makes of old,
// learned at now; nil for a state this build does not know. The snapshot
// a denial carries is what the event says; the alternatives and the
// policy's modes come from old, which a transition does not change.
func eventEntry(name string, e *pb.Event, old *entry, now time.Time) *entry {
	switch e.GetTo() {
	case pb.State_STATE_OPEN, pb.State_STATE_CLOSED, pb.State_STATE_FORCED_OPEN, pb.State_STATE_PAUSED,
		pb.State_STATE_FORCED_CLOSED, pb.State_STATE_HALF_OPEN:
	default:
		return nil
	}
	st := &pb.BreakerState{Breaker: name, State: e.GetTo(), Generation: e.GetGeneration(), Failures: e.GetFailures(),
		DistinctWorkers: e.GetDistinctWorkers(), CooldownMs: e.GetCooldownMs(), Reason: e.GetReason(), AsOfMs: e.GetAtMs(),
		Alternatives: old.st.GetAlternatives(), WindowMode: old.window, SlowCallMs: old.slowMs,
		ShadowSetting: old.st.GetShadowSetting(), Denial: e.GetState().GetDenial(), SuspectDenial: e.GetState().GetSuspectDenial()}
	if e.GetTo() == pb.State_STATE_OPEN {
		st.OpenedAtMs, st.NextProbeAtMs = e.GetAtMs(), e.GetAtMs()+e.GetCooldownMs()
	}
	n := newEntry(name, st, now)
	n.child, n.policyShadow = old.child, old.policyShadow
	// AUTO and transitions start fresh; a pin keeps the run it had.
	n.run = e.GetKind() == pb.EventKind_EVENT_KIND_FORCED && e.GetTo() == pb.State_STATE_CLOSED && e.GetFailures() > 0
	return n
}

// goRefresh reads name's snapshot in the background into the view.
func (c *Client) goRefresh(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	ver, all := c.view.stamp(name)
	sent := c.o.clock.Now()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, c.o.rpcTimeout)
		defer cancel()
		res, err := c.api.BatchGet(ctx, &pb.BatchGetRequest{Breakers: []string{name}})
		if err != nil || len(res.GetStates()) != 1 {
			c.log("client: reading "+name+" for the fast view", err)
			return
		}
		c.learn(name, entryOf(res.GetStates()[0], 0, 0, sent), ver, all)
	}()
}

// fastWatch keeps the view in step with breakerd until ctx ends:
// subscribe (with run notices), resync every known breaker with BatchGet
// once the subscription is live, apply each event; on any break (breakerd
// ends a stream that fell behind too) mark the view not live and start
// again after retry.
func (c *Client) fastWatch(ctx context.Context, retry time.Duration) {
	c.rewatch(ctx, retry, c.fastWatchOnce, func() {
		c.view.live.Store(false)
		c.view.mu.Lock()
		c.view.all++
		c.view.mu.Unlock()
	}, "client: watch stream ended; resyncing the fast view")
}

func (c *Client) fastWatchOnce(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Events arriving while the resync runs are applied after it, in
	// order (watchStream buffers them).
	events, recvErr, err := c.watchStream(ctx, &pb.WatchRequest{RunNotices: true})
	if err != nil {
		return err
	}
	if err := c.resync(ctx); err != nil {
		return err
	}
	c.view.syncs.Add(1)
	c.heard.Store(c.o.clock.Now().UnixNano())
	c.view.live.Store(true)
	for e := range events {
		c.onEvent(e)
	}
	return <-recvErr
}

// resync reads every breaker the view holds (BatchGet, limits.MaxBatch a
// call) and replaces their entries; a breaker an event moved meanwhile
// keeps the event's word.
func (c *Client) resync(ctx context.Context) error {
	names := c.view.names()
	for len(names) > 0 {
		n := min(len(names), limits.MaxBatch)
		chunk := names[:n]
		names = names[n:]
		c.view.mu.Lock()
		c.view.all++
		all := c.view.all
		vers := make([]uint64, len(chunk))
		for i, b := range chunk {
			vers[i] = c.view.ver[slot(b)]
		}
		c.view.mu.Unlock()
		sent := c.o.clock.Now()
		lctx, cancel := context.WithTimeout(ctx, c.o.listTimeout)
		res, err := c.api.BatchGet(lctx, &pb.BatchGetRequest{Breakers: chunk})
		cancel()
		if err != nil {
			return err
		}
		for i, s := range res.GetStates() {
			if i < len(chunk) {
				c.learn(chunk[i], entryOf(s, 0, 0, sent), vers[i], all)
			}
		}
	}
	return nil
}

// queued is one outcome waiting to be sent.
type queued struct {
	req   *pb.RecordRequest
	probe bool
	local bool              // the local breaker holds it already
	link  trace.SpanContext // the tool call's span, linked from the batch's (tracing.go)
}

// sender is the fast-mode outbox: Record appends, one goroutine sends.
type sender struct {
	mu      sync.Mutex
	q       []queued
	spare   []queued // a sent queue's emptied slice, for the next
	busy    int      // outcomes taken by the sender and not yet sent
	wake    chan struct{}
	idle    *sync.Cond
	dropped atomic.Int64
	skipped atomic.Int64
	stale   atomic.Int64
	sent    atomic.Int64
	batches atomic.Int64
}

func newSender() *sender {
	s := &sender{wake: make(chan struct{}, 1)}
	s.idle = sync.NewCond(&s.mu)
	return s
}

// fastRecord queues r for the permit's breaker, or skips it, and returns
// at once. A call in a trace (ctx's span) sends its trace id with the
// outcome and is linked from the batch's span.
func (c *Client) fastRecord(ctx context.Context, p *Permit, r Result) *pb.RecordResponse {
	if r.Outcome == pb.Outcome_OUTCOME_SUCCESS {
		c.worked.Store(p.Breaker, true)
	}
	probe := p.Ticket.GetLeaseToken() != ""
	success := r.Outcome == pb.Outcome_OUTCOME_SUCCESS && !probe
	// A slow success (the view's slow_call_ms, compared in whole ms as
	// breakerd does) extends a slow run: sent, like a failure.
	e := c.view.get(p.Breaker)
	slow := success && e != nil && e.slowMs > 0 && limits.ClampMs(r.Latency.Milliseconds()) > e.slowMs
	if success && !slow && c.view.live.Load() {
		if e := c.view.get(p.Breaker); e != nil && !e.run && !e.window && !e.child && (e.state == pb.State_STATE_CLOSED ||
			e.state == pb.State_STATE_FORCED_CLOSED) && e.gen >= p.Ticket.GetGeneration() {
			// Closed with no run, not counting in window mode (or the
			// ticket is already stale): a success changes nothing in Redis.
			c.out.skipped.Add(1)
			return &pb.RecordResponse{Note: "not sent: the breaker is closed with no failure run (fast mode)"}
		}
	}
	if (!success || slow) && !probe && r.Outcome != pb.Outcome_OUTCOME_CANCELED {
		// This worker's own failure (or slow success) starts or extends a
		// run: its next successes must reach breakerd, before any notice
		// comes back.
		c.view.update(p.Breaker, func(old *entry) *entry {
			if old == nil || old.state != pb.State_STATE_CLOSED || old.gen != p.Ticket.GetGeneration() {
				return old
			}
			cp := *old
			cp.run = true
			return &cp
		})
	}
	_, worked := c.worked.Load(p.Breaker)
	retryMs, deadlineMs := wireWait(r.RetryAfter, r.Deadline)
	req := &pb.RecordRequest{
		Breaker: p.Breaker, WorkerId: c.worker(), Ticket: p.Ticket, Outcome: r.Outcome,
		RetryAfterMs: retryMs, DeadlineMs: deadlineMs, LatencyMs: limits.ClampMs(r.Latency.Milliseconds()),
		Message:          oneLine(r.Message, maxMessageBytes),
		CredentialWorked: r.Outcome == pb.Outcome_OUTCOME_UNAUTHENTICATED && (r.CredentialWorked || worked),
		RecordId:         newRecordID(), // every attempt (grpc retries it) counts once
	}
	link := trace.SpanContextFromContext(ctx)
	if link.IsValid() {
		req.TraceId = link.TraceID().String()
	}
	local := c.recordUnheard(p, r)
	s := c.out
	s.mu.Lock()
	if success && len(s.q)+s.busy >= FastQueueLimit {
		s.mu.Unlock()
		s.dropped.Add(1)
		return &pb.RecordResponse{Note: "dropped: the fast-mode queue is full (successes only are dropped)"}
	}
	s.q = append(s.q, queued{req: req, probe: probe, local: local, link: link})
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return &pb.RecordResponse{Note: "queued: fast mode sends outcomes in the background"}
}

// recordUnheard gives r to the local breaker when the view no longer
// hears breakerd (the local breaker answers while Allow cannot reach it:
// it counts this worker's own outcomes now, not once a send has timed
// out), and reports whether the local breaker holds r.
func (c *Client) recordUnheard(p *Permit, r Result) bool {
	if p.localHas {
		return true
	}
	if c.view.live.Load() {
		return false
	}
	c.local.record(p.Breaker, nil, r)
	return true
}

// send is the sender goroutine: it takes everything queued and sends it
// in RecordBatch calls of at most limits.MaxBatch outcomes, then takes
// what was queued meanwhile.
func (c *Client) send() {
	defer c.wg.Done()
	s := c.out
	for {
		select {
		case <-s.wake:
		case <-c.ctx.Done():
			s.mu.Lock()
			s.idle.Broadcast()
			s.mu.Unlock()
			return
		}
		for c.sendQueued() {
		}
	}
}

// sendQueued takes the whole queue (Record appends to another slice
// meanwhile: taking costs the same however long the queue grew while
// breakerd was slow) and sends it batch by batch, until the client is
// closed: what is left then goes nowhere (Close), however many batches it
// would take against a daemon that stalls. It reports whether more was
// queued meanwhile.
func (c *Client) sendQueued() bool {
	s := c.out
	s.mu.Lock()
	all := s.q
	s.q, s.spare = s.spare, nil
	s.busy = len(all)
	s.mu.Unlock()
	for taken := all; len(taken) > 0; {
		if c.ctx.Err() != nil {
			clear(taken)
			break
		}
		n := min(len(taken), limits.MaxBatch)
		c.sendBatch(c.fresh(taken[:n]))
		clear(taken[:n]) // what was sent is garbage now, not once the rest is
		taken = taken[n:]
		s.mu.Lock()
		s.busy -= n
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy = 0
	if cap(all) <= FastQueueLimit { // a storm's long queue is not kept
		s.spare = all[:0]
	}
	more := len(s.q) > 0 && c.ctx.Err() == nil
	if !more {
		s.idle.Broadcast()
	}
	return more
}

// fresh returns the outcomes of qs that breakerd could still count,
// counting the others (stale) in Stats.StaleNotSent.
func (c *Client) fresh(qs []queued) []queued {
	batch := make([]queued, 0, len(qs))
	for _, q := range qs {
		if c.stale(q) {
			c.out.stale.Add(1)
			continue
		}
		batch = append(batch, q)
	}
	return batch
}

// sendBatch sends batch in one RecordBatch and learns breakerd's answers;
// when breakerd cannot be reached, the local breaker takes the outcomes
// it does not hold yet, as Record does.
func (c *Client) sendBatch(batch []queued) {
	n := len(batch)
	if n == 0 {
		return
	}
	reqs := make([]*pb.RecordRequest, n)
	vers := make([]uint64, n)
	var all uint64
	c.view.mu.Lock()
	all = c.view.all
	for i, q := range batch {
		reqs[i] = q.req
		vers[i] = c.view.ver[slot(q.req.GetBreaker())]
	}
	c.view.mu.Unlock()
	sent := c.o.clock.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.o.recordTimeout)
	ctx, end := batchSpan(ctx, batch)
	res, err := c.api.RecordBatch(ctx, &pb.RecordBatchRequest{Records: reqs})
	end(err)
	cancel()
	c.noteReach(err)
	c.out.batches.Add(1)
	switch {
	case err != nil && reachFailure(err):
		for _, q := range batch {
			if q.local {
				continue
			}
			c.local.record(q.req.GetBreaker(), nil, Result{Outcome: q.req.GetOutcome(),
				RetryAfter: time.Duration(q.req.GetRetryAfterMs()) * time.Millisecond,
				Deadline:   time.Duration(q.req.GetDeadlineMs()) * time.Millisecond})
		}
	case err != nil:
		c.log("client: sending outcomes (fast mode)", err)
	default:
		c.out.sent.Add(int64(n))
		for i, r := range res.GetResults() {
			// What breakerd answered is the breaker's state after the
			// record: keep it unless an event about it came meanwhile.
			if i < n && r.GetState() != nil && !r.GetDegraded() {
				c.learn(reqs[i].GetBreaker(), entryOf(r.GetState(), 0, 0, sent), vers[i], all)
			}
		}
	}
}

// stale reports whether breakerd would surely not count q, so it need
// not be sent: its breaker has moved past the ticket's generation in the
// view (a trip, a Force, a probe's verdict). Kept: probe outcomes, and the
// outcomes that act whatever the generation (a 429's Retry-After may push
// an open breaker's next probe later; 401 and 402 raise alerts).
func (c *Client) stale(q queued) bool {
	switch q.req.GetOutcome() {
	case pb.Outcome_OUTCOME_RATE_LIMITED, pb.Outcome_OUTCOME_UNAUTHENTICATED, pb.Outcome_OUTCOME_QUOTA_EXHAUSTED:
		return false
	}
	if q.probe {
		return false
	}
	e := c.view.get(q.req.GetBreaker())
	return e != nil && e.gen > q.req.GetTicket().GetGeneration()
}

// Flush waits until every outcome queued in fast mode has been sent (or
// handed to the local fallback), or ctx ends (its error). Without fast
// mode it returns at once.
func (c *Client) Flush(ctx context.Context) error {
	if c.out == nil {
		return nil
	}
	s := c.out
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.idle.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.q)+s.busy > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if c.ctx.Err() != nil {
			return c.ctx.Err()
		}
		select {
		case s.wake <- struct{}{}:
		default:
		}
		s.idle.Wait()
	}
	return nil
}

// wholeMs rounds a positive wait up to whole milliseconds, as breakerd
// answers retry_after (never down to 0, which would read as no wait).
func wholeMs(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}
