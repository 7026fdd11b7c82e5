// Package scope runs parent scopes (a policy's `parent`): a child's Allow
// with its parent's verdict as an input, the parent's probe taken through
// a child, and a child's outcomes counted toward its parent.
//
// A child's breaker and its parent's live under different keys, and on
// Redis Cluster in different slots, so no one script reads both. The
// daemon keeps a view of each parent it has used, fed by the events hub,
// and passes the parent's verdict into the child's script
// (store.AllowUnder; the rule is breaker/parent.go). The view of a parent
// is read once (Get) on first use; every event about the parent (a
// transition, a Force, an alert, a run notice) marks it stale, and the
// next call reads it again. When the hub's feed is lost (events.ErrFeedLost,
// or this reader fell behind: events.ErrTooSlow) the whole view is dropped
// after subscribing again, so every parent is read again on its next use.
// Until the hub's first subscription is confirmed (events.Hub.Live) the
// view keeps nothing: every child's Allow reads its parent.
//
// Staleness bound: a child's Allow sees its parent as the parent stood
// when the last event about it reached this daemon, or when this daemon
// last ran one of the parent's scripts (a child's half, or a Record
// naming the parent itself). Between a parent's transition made through another
// daemon and its event's delivery (milliseconds; the same delay as a
// Watch stream's) a child may still be let through a parent that has just
// opened, or denied by one an operator has just closed.
// Time never makes the view stale: the parent's end of a denial (its next
// probe, its lease's end, its pin's or pause's end) is passed with the
// verdict and judged on the fleet's clock in the child's script; once it
// is reached, the parent's own script is asked (it may take a probe) and
// the child's again. The view also learns from every answer the parent's
// scripts give this daemon, unless an event or another answer about the
// parent came while the script ran (then it reads the parent again).
//
// The parent's probe. A parent whose cooldown has elapsed needs one probe
// fleet-wide, and only its children's calls may be there to make it: the
// child's Allow that finds the parent due runs allow.lua on the parent's
// key as the same worker. If that takes the parent's probe lease, the
// child's script runs again with the verdict PROBE (the child decides by
// its own rules) and an answer that lets the call out carries the
// parent's lease in its ticket (Ticket.parent_lease_token): the child's
// Record settles the parent's probe with the same outcome, whatever
// count_toward_parent says, so that a parent with no direct traffic
// never stays open for good. Every other child call meanwhile is denied
// with the parent's probe in flight. If the child itself denies that call
// (it is open, paused, or this worker is its suspect), the parent's lease
// is released at once (a Record with OUTCOME_CANCELED on the parent:
// probe_released). A lease whose holder never records lapses after the
// parent's probe_timeout, as any probe lease does, and the next child call
// takes the probe.
//
// Counting toward the parent (count_toward_parent, the default). After a
// child's record.lua counted an outcome (a failure, a slow call, or a
// success ending a run), the daemon runs record.lua on the parent's key
// with the same outcome under the parent's policy and the same worker, so
// the parent's quorum counts distinct workers across all its children.
// The parent's half is fenced by the parent's generation the child's
// Allow saw (Ticket.parent_generation): an outcome of a call admitted
// before the parent moved is not counted there. A success is sent only
// when it could change the parent as this daemon's view stands (a
// failure run or a slow run in progress, a suspect, window mode, or a
// slow call under the parent's policy), so a healthy pair costs one
// script. 401 and 402 outcomes are the child's own (its credential or
// quota) and are not sent, and neither is a success of a caller whose
// token may not name the parent (mayName).
//
// Not atomic. The two scripts run one after the other on different keys:
// another daemon's calls may run on the parent between them, so the
// parent may trip, close or be forced in between (then the parent's half
// is not counted: its generation moved), and a daemon that stops between
// the two (or a parent slot that does not answer) leaves the child's
// outcome counted and the parent's not (logged; the Record still
// answers the child's result). A parent whose keys lapsed (its retention
// after a quiet close) reads as generation 0 with no event: the first
// outcome sent to it after that is fenced out as stale, and the view
// learns the parent's answer, so the next one counts.
package scope

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/store"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Scopes answers Allow and Record for breakers with and without a parent
// (those without go straight to the store). It is safe for concurrent use.
type Scopes struct {
	st  *store.Store
	hub *events.Hub
	log *slog.Logger

	mu      sync.Mutex
	entries map[string]*entry
	// sub is the hub subscription feeding the view, opened on the first
	// use of a parent; ended is set once the hub has stopped (the view
	// then caches nothing).
	sub   *events.Subscription
	ended bool
	// epoch is bumped whenever the view is dropped, so that a read in
	// flight does not store what it read before the loss.
	epoch uint64
}

// entry is the view of one parent.
type entry struct {
	ver     uint64 // bumped by every event about the parent
	seq     uint64 // bumped by every answer stored (store)
	have    bool
	verdict breaker.Parent
	state   *pb.BreakerState
	loading chan struct{} // closed when the read in flight ends
}

// held returns the verdict e holds, the state it was judged on and its
// stamp, when e holds one that reread (nil: any) accepts. Under Scopes.mu.
func (e *entry) held(reread func(breaker.Parent) bool) (breaker.Parent, *pb.BreakerState, stamp, bool) {
	if !e.have || reread != nil && reread(e.verdict) {
		return breaker.Parent{}, nil, stamp{}, false
	}
	return e.verdict, e.state, stamp{e.ver, e.seq}, true
}

// stamp is what a learner saw of an entry before its script ran: an
// answer is stored only if neither an event (ver) nor another answer (seq)
// came meanwhile, so that of two answers that raced (two Records of one
// batch forwarded to the parent at once) neither overwrites the other
// blindly: the entry is dropped and read again.
type stamp struct{ ver, seq uint64 }

// New returns Scopes over st, fed by hub (nil: no view is kept, and every
// child's Allow reads its parent).
func New(st *store.Store, hub *events.Hub, log *slog.Logger) *Scopes {
	if log == nil {
		log = slog.Default()
	}
	return &Scopes{st: st, hub: hub, log: log, entries: map[string]*entry{}}
}

// Allow answers whether a call to breaker may go out, under its parent's
// verdict when its policy names one. Errors are the store's.
func (s *Scopes) Allow(ctx context.Context, name, worker string) (*pb.AllowResponse, error) {
	p := s.st.Policy(name)
	if p.Parent == "" {
		return s.st.Allow(ctx, name, worker)
	}
	// The parent's read and the child's decision share one bound.
	ctx = store.DecisionBegun(ctx, time.Now())
	v, at, err := s.verdict(ctx, p.Parent)
	if err != nil {
		// The parent cannot be read (its slot does not answer): the child
		// decides alone rather than not at all.
		s.log.Warn("scope: parent unreadable; the child decides alone", "breaker", name, "parent", p.Parent, "err", err)
		v = breaker.Parent{}
	}
	res, due, err := s.st.AllowUnder(ctx, name, worker, v)
	if err != nil || !due {
		return res, err
	}
	// The parent's denial has ended by the fleet's clock: its own script
	// decides (it may hand this call its probe lease).
	pres, err := s.st.Allow(ctx, p.Parent, worker)
	if err != nil {
		return nil, err
	}
	pv := s.learnAllow(p.Parent, at, pres)
	switch pres.GetDecision() {
	case pb.Decision_DECISION_ALLOWED, pb.Decision_DECISION_PROBE:
		again, _, err := s.st.AllowUnder(ctx, name, worker, pv)
		if pres.GetDecision() == pb.Decision_DECISION_PROBE && (err != nil || !letThrough(again)) {
			s.release(ctx, p.Parent, worker, pres.GetTicket())
		}
		return again, err
	}
	// The parent still denies (its view was stale): this call is denied
	// with the parent's own answer.
	res.Denial = breaker.ParentDenial(pres.GetDenial().GetDenyUntilMs(), pres.GetDenial())
	res.RetryAfterMs, res.Reason, res.Scope = pres.GetRetryAfterMs(), res.Denial.GetReason(), p.Parent
	return res, nil
}

// letThrough reports whether res lets the call out.
func letThrough(res *pb.AllowResponse) bool {
	d := res.GetDecision()
	return d == pb.Decision_DECISION_ALLOWED || d == pb.Decision_DECISION_PROBE
}

// release frees the parent's probe lease this worker took for a call the
// child then denied: a Record that never counts (probe_released).
func (s *Scopes) release(ctx context.Context, parent, worker string, t *pb.Ticket) {
	at := s.stampOf(parent)
	res, err := s.st.Record(ctx, &pb.RecordRequest{Breaker: parent, WorkerId: worker, Ticket: t,
		Outcome: pb.Outcome_OUTCOME_CANCELED})
	if err != nil {
		s.log.Warn("scope: could not release the parent's probe lease; it lapses after its probe_timeout",
			"parent", parent, "worker", worker, "err", err)
		return
	}
	s.learnState(parent, at, res.GetState())
}

// Record applies a call's outcome, in, to its breaker and, for a child,
// to its parent (see the package doc): the parent's probe lease in the
// ticket is always settled; with count_toward_parent a counted outcome
// is counted there too, as in.ForParent. It answers the child's result;
// a failure of the parent's half is logged, not returned (the child's
// half has counted).
func (s *Scopes) Record(ctx context.Context, in store.RecordInput) (*pb.RecordResponse, error) {
	at, inView := s.stampIn(in.Breaker)
	res, err := s.st.Apply(ctx, in)
	p := in.Policy
	if err != nil || res.GetDegraded() {
		return res, err
	}
	// A parent in view learns from its own calls' answers too: a trip
	// this daemon made is known before its event comes back.
	if inView {
		s.learnState(in.Breaker, at, res.GetState())
	}
	if p.Parent == "" {
		return res, nil
	}
	t := in.Ticket
	lease := t.GetParentLeaseToken()
	if lease == "" && (!p.CountTowardParent || !res.GetCounted()) {
		return res, nil
	}
	pin, err := in.ForParent(p.Parent, &pb.Ticket{Generation: t.GetParentGeneration(), LeaseToken: lease})
	if err == nil {
		if lease == "" && in.Outcome == pb.Outcome_OUTCOME_SUCCESS && (!mayName(ctx, p.Parent) || !s.successMatters(ctx, pin)) {
			return res, nil
		}
		at := s.stampOf(p.Parent)
		var pres *pb.RecordResponse
		if pres, err = s.st.Apply(ctx, pin); err == nil {
			s.learnState(p.Parent, at, pres.GetState())
			return res, nil
		}
	}
	s.log.Warn("scope: the parent's half of a Record failed; the child's outcome counted, the parent's did not",
		"breaker", in.Breaker, "parent", p.Parent, "err", err)
	return res, nil
}

// mayName reports whether the caller's token may name breaker (a token
// limited to some breakers; any caller without tokens). A caller that may
// not name the parent sends it no success: a token limited to a child
// cannot end the parent's runs (nor dilute its window), so it cannot hold
// the parent closed against the other children's failures.
func mayName(ctx context.Context, breaker string) bool {
	id, _ := auth.FromContext(ctx)
	return id.MayUse(breaker)
}

// successMatters reports whether a success, as the parent records it
// (pin), could change the parent as the view stands
// (breaker.State.RunOpen, window mode, or a slow call under the parent's
// policy). An unreadable parent is sent the success.
func (s *Scopes) successMatters(ctx context.Context, pin store.RecordInput) bool {
	parent, pp := pin.Breaker, pin.Policy
	if pp.SlowCall > 0 && pin.Call.Latency > pp.SlowCall.Milliseconds() {
		return true
	}
	_, _, err := s.verdict(ctx, parent)
	if err != nil {
		return true
	}
	s.mu.Lock()
	e := s.entries[parent]
	var st *pb.BreakerState
	if e != nil {
		st = e.state
	}
	s.mu.Unlock()
	if st == nil {
		return true
	}
	switch st.GetState() {
	case pb.State_STATE_CLOSED, pb.State_STATE_FORCED_CLOSED, pb.State_STATE_UNSPECIFIED:
		return st.GetWindowMode() || st.GetFailures() > 0 || st.GetSlowCalls() > 0 || st.GetSuspectWorker() != ""
	}
	return false // open, half-open, paused: a success without the lease counts nothing there
}

// VerdictOf is the verdict a parent's snapshot gives its children: the
// machine's read rule for any worker (breaker.View.Verdict), as a child's
// Allow receives it (breaker.Verdict.Parent), judged at the snapshot's
// own time. A parent whose probe is due (or half-open with no lease end
// in the snapshot) reads as a denial that ends then, so the child's
// script finds it due at once and the parent's script decides (it knows
// the lease).
func VerdictOf(st *pb.BreakerState) breaker.Parent {
	v, policyShadow := breaker.ViewOfProto(st)
	now := max(v.Now, 1)
	pv := v.Verdict(breaker.Query{Now: now, PolicyShadow: policyShadow}).Parent(now)
	pv.Name, pv.Gen, pv.Reason, pv.Denial = st.GetBreaker(), st.GetGeneration(), st.GetReason(), st.GetDenial()
	return pv
}

// learnAllow stores what the parent's allow.lua answered in the view
// (unless an event or another answer about the parent came since at) and returns the
// verdict for the call that asked: PROBE when it took the lease.
func (s *Scopes) learnAllow(parent string, at stamp, pres *pb.AllowResponse) breaker.Parent {
	st := pres.GetState()
	call := breaker.Parent{Name: parent, Gen: pres.GetTicket().GetGeneration(), Reason: pres.GetReason(), Denial: pres.GetDenial()}
	shared := VerdictOf(st)
	shared.Name = parent
	asOf := st.GetAsOfMs()
	share := true
	switch d := pres.GetDecision(); d {
	case pb.Decision_DECISION_ALLOWED:
	case pb.Decision_DECISION_PROBE:
		call.Decision, call.Lease = d, pres.GetTicket().GetLeaseToken()
		// Every other caller: the probe is in flight for the lease's life.
		shared.Decision = pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT
		shared.Until = asOf + s.st.Policy(parent).ProbeTimeout.Milliseconds()
	case pb.Decision_DECISION_DENIED_SUSPECT_WORKER:
		// This worker's own denial on the parent: not the fleet's.
		call.Decision, call.Until = pb.Decision_DECISION_DENIED_OPEN, asOf+pres.GetRetryAfterMs()
		share = false
	default:
		call.Decision = d
		if u := pres.GetDenial().GetDenyUntilMs(); u != breaker.Forever {
			call.Until = u
		}
		shared = call
	}
	if share {
		s.store(parent, at, shared, st)
	}
	return call
}

// learnState stores a parent's snapshot (from a script this daemon ran
// on it) in the view, unless an event or another answer about the parent
// came since at.
func (s *Scopes) learnState(parent string, at stamp, st *pb.BreakerState) {
	if st == nil {
		return
	}
	v := VerdictOf(st)
	v.Name = parent
	s.store(parent, at, v, st)
}

// store keeps an answer about parent in the view if nothing about it came
// since at; otherwise it drops what the view holds (the next call reads).
func (s *Scopes) store(parent string, at stamp, v breaker.Parent, st *pb.BreakerState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[parent]
	if e == nil || !s.caching() {
		return
	}
	if e.ver != at.ver || e.seq != at.seq {
		e.have = false
		return
	}
	e.have, e.verdict, e.state = true, v, st
	e.seq++
}

// Heard returns how many times the view of parent was marked stale since
// it was first used: each event about the parent this daemon heard, and
// each lost feed. 0 for a parent never used. (Tests wait on it.)
func (s *Scopes) Heard(parent string) uint64 { return s.stampOf(parent).ver }

// stampOf returns the parent's entry stamp (zero for a parent not in view).
func (s *Scopes) stampOf(parent string) stamp {
	at, _ := s.stampIn(parent)
	return at
}

// stampIn is stampOf, and whether the view holds an entry for parent at
// all: a breaker no call has read as a parent has nothing to learn.
func (s *Scopes) stampIn(parent string) (stamp, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[parent]; e != nil {
		return stamp{e.ver, e.seq}, true
	}
	return stamp{}, false
}

// verdict returns the parent's verdict from the view, reading the parent
// (one read.lua, shared by the calls that wait for it) when the view does
// not hold it, and the entry's stamp the verdict is valid for.
func (s *Scopes) verdict(ctx context.Context, parent string) (breaker.Parent, stamp, error) {
	v, _, at, err := s.view(ctx, parent, nil)
	return v, at, err
}

// view is verdict with the parent's state it was judged on, read again
// when reread (nil: never) says the verdict the view holds will not do.
// A decision waits on the read, its own or another call's: it is bounded
// as the decision is (store.WithinDecision).
func (s *Scopes) view(ctx context.Context, parent string, reread func(breaker.Parent) bool) (breaker.Parent, *pb.BreakerState, stamp, error) {
	s.mu.Lock()
	s.follow()
	e := s.entries[parent]
	if e == nil {
		e = &entry{}
		s.entries[parent] = e
	}
	if v, st, at, ok := e.held(reread); ok { // no read, no bound
		s.mu.Unlock()
		return v, st, at, nil
	}
	s.mu.Unlock()
	ctx, cancel := s.st.WithinDecision(ctx)
	defer cancel()
	s.mu.Lock()
	for {
		if v, st, at, ok := e.held(reread); ok {
			s.mu.Unlock()
			return v, st, at, nil
		}
		if e.loading == nil {
			break
		}
		ch := e.loading
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return breaker.Parent{}, nil, stamp{}, ctx.Err()
		}
		s.mu.Lock()
	}
	ch := make(chan struct{})
	e.loading = ch
	at, epoch := stamp{e.ver, e.seq}, s.epoch
	s.mu.Unlock()

	st, err := s.st.Get(ctx, parent)

	s.mu.Lock()
	defer s.mu.Unlock()
	e.loading = nil
	close(ch)
	if err != nil {
		return breaker.Parent{}, nil, stamp{}, err
	}
	v := VerdictOf(st)
	v.Name = parent
	switch {
	case e.ver == at.ver && e.seq == at.seq && s.epoch == epoch && s.caching():
		e.have, e.verdict, e.state = true, v, st
		e.seq++
		at.seq++
	default:
		e.have = false // something came meanwhile: the next call reads again
	}
	return v, st, at, nil
}

// caching reports whether the view may keep what it reads (s.mu held):
// only while its subscription is open and the hub's feed is live (before
// the hub's first subscription is confirmed, an event could be missed
// with no ErrFeedLost to say so: every call then reads its parent).
func (s *Scopes) caching() bool {
	if s.sub == nil {
		return false
	}
	select {
	case <-s.hub.Live():
		return true
	default:
		return false
	}
}

// follow opens the hub subscription feeding the view, once (s.mu held).
func (s *Scopes) follow() {
	if s.sub != nil || s.ended || s.hub == nil {
		return
	}
	s.sub = s.hub.Subscribe(nil)
	go s.run(s.sub)
}

// run applies the feed to the view until the subscription ends; a lost
// feed subscribes again, then drops the view.
func (s *Scopes) run(sub *events.Subscription) {
	for {
		for e := range sub.C {
			s.mu.Lock()
			if en := s.entries[e.GetBreaker()]; en != nil {
				en.ver++
				en.have = false
			}
			s.mu.Unlock()
		}
		err := sub.Err()
		s.mu.Lock()
		if err == nil { // the hub stopped: keep nothing from now on
			s.ended, s.sub = true, nil
			s.drop()
			s.mu.Unlock()
			return
		}
		s.log.Warn("scope: the events feed was lost; every parent is read again on its next use", "err", err)
		sub = s.hub.Subscribe(nil)
		s.sub = sub
		s.drop()
		s.mu.Unlock()
	}
}

// drop forgets every parent (s.mu held); reads in flight store nothing.
func (s *Scopes) drop() {
	for _, e := range s.entries {
		e.ver++
		e.have = false
	}
	s.epoch++
}

// WithParents puts each parent scope's verdict into its children's
// deny_until_ms and denial, as Get, BatchGet and List report them: the machine's read
// rule (breaker.View.Verdict) for any worker, given the parent's verdict
// from the view, judged at the child's clock (parentAt). A parent that
// cannot be read leaves the child's own verdict, as Allow then decides
// alone.
func (s *Scopes) WithParents(ctx context.Context, states []*pb.BreakerState) {
	read := map[string]judged{}
	for _, st := range states {
		parent := s.st.Policy(st.GetBreaker()).Parent
		if parent == "" || st == nil {
			continue
		}
		pv, now, err := s.parentAt(ctx, parent, st.GetAsOfMs(), read)
		if err != nil || !pv.Denies() {
			continue
		}
		v, policyShadow := breaker.ViewOfProto(st)
		vd := v.Verdict(breaker.Query{Now: max(now, 1), PolicyShadow: policyShadow, Parent: pv})
		if vd.Holds() {
			st.DenyUntilMs = max(st.GetDenyUntilMs(), vd.Until)
		}
		if vd.Decision == pb.Decision_DECISION_DENIED_PARENT_OPEN && !vd.Due {
			// The parent's denial comes before the breaker's own and
			// its suspect's (the read rule's order). A breaker that
			// holds no state is read at the clock its parent was.
			st.Denial, st.SuspectDenial = breaker.ParentDenial(vd.Until, pv.Denial), nil
			st.AsOfMs = max(st.GetAsOfMs(), now)
		}
	}
}

// judged is a parent's verdict and the fleet's clock it was judged at.
type judged struct {
	pv  breaker.Parent
	now int64
}

// parentAt returns the verdict of parent for a child read at asOf (its
// as_of_ms) and the fleet's clock to judge it at: the child's own. A
// child that holds no state has no clock (asOf 0), and the view's
// verdict is as old as its read (time never makes it stale: the parent's
// probe may be due since), so a verdict that ends by itself is judged on
// the parent's own clock: the parent is read now, once per answer (read).
// A verdict that only an operator ends needs no clock.
func (s *Scopes) parentAt(ctx context.Context, parent string, asOf int64, read map[string]judged) (breaker.Parent, int64, error) {
	if asOf > 0 {
		pv, _, err := s.verdict(ctx, parent)
		return pv, asOf, err
	}
	if j, ok := read[parent]; ok {
		return j.pv, j.now, nil
	}
	ends := func(pv breaker.Parent) bool { return pv.Denies() && pv.Until != 0 }
	pv, st, _, err := s.view(ctx, parent, ends)
	if err != nil {
		return pv, 0, err
	}
	now := int64(0)
	if ends(pv) {
		now = st.GetAsOfMs()
	}
	read[parent] = judged{pv, now}
	return pv, now, nil
}
