package breaker

import pb "github.com/breakerd/breakerd/proto/breakerd/v1"

// Parent scopes. A policy may name a parent breaker (the vendor host
// search-vendor for the tools web_search and news_search). The parent is
// a breaker in its own right; its verdict is an input to each child's
// Allow, because on Redis Cluster the two live in different slots and no
// one script can read both. The daemon keeps the parent's verdict from
// its event-fed view (internal/scope) and passes it in; the child's
// script judges it against the fleet's clock (Redis TIME).
//
// The rule, in the order Allow applies it (step.allow):
//
//  1. A pin on the child decides first: forced open denies
//     (DENIED_FORCED_OPEN), forced closed allows whatever the parent says
//     (an operator's word on the child is the more specific one).
//  2. A parent that denies (open, a probe in flight, forced open, paused)
//     denies the child with DENIED_PARENT_OPEN until Parent.Until, and
//     RetryAfter is what is left of it. The child's own state is not
//     touched: an open child whose cooldown ended stays open, no lease is
//     taken, nothing is written (expired pins and pauses aside, which
//     every call ends).
//  3. A parent whose denial has ended by the fleet's clock (Until reached:
//     its cooldown elapsed, its probe lease lapsed, its pin or pause
//     ended) may need a probe, and the child cannot move it: the answer is
//     DENIED_PARENT_OPEN with Result.ParentDue set, and the daemon asks
//     the parent's own script, then asks the child again with the
//     parent's fresh verdict (see internal/scope).
//  4. Otherwise (the parent lets calls through, or this caller holds the
//     parent's probe lease, PROBE) the child decides by its own rules.
//  5. A child in shadow mode (shadow.go) is still denied by its parent:
//     DENIED_PARENT_OPEN is the parent's decision, enforced unless the
//     parent itself is shadowed. A shadowed parent's verdict is its
//     enforced state, closed, so it denies no child (its shadow probe is
//     taken only by calls made on the parent itself).

// Parent is a parent scope's verdict as a child's Allow receives it.
type Parent struct {
	// Decision is the parent's answer: UNSPECIFIED or ALLOWED, it lets
	// calls through (closed, forced closed, or no parent); DENIED_OPEN,
	// DENIED_PROBE_IN_FLIGHT, DENIED_FORCED_OPEN or DENIED_PAUSED, it
	// denies until Until; PROBE, this caller holds the parent's probe
	// lease (the child then decides alone).
	Decision pb.Decision
	// Until is when the parent's denial ends by itself, ms since the epoch
	// on the fleet's clock: its next probe, its probe lease's end, its
	// pin's or its pause's end. 0: only an operator ends it.
	Until int64

	// Name, Reason, Denial, Gen and Lease are not part of the rule: the
	// store renders them into the answer. Name is the parent's name (the
	// AllowResponse's scope), Reason the parent's reason in plain words
	// (for operators), Denial the parent's own denial (its words for a
	// model; nil when unknown), Gen the parent's generation and Lease its
	// probe lease token (PROBE only) for the child's ticket.
	Name   string
	Reason string
	Denial *pb.Denial
	Gen    int64
	Lease  string
}

// Denies reports whether the verdict denies the child (until Until).
func (p Parent) Denies() bool {
	switch p.Decision {
	case pb.Decision_DECISION_DENIED_OPEN, pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT,
		pb.Decision_DECISION_DENIED_FORCED_OPEN, pb.Decision_DECISION_DENIED_PAUSED:
		return true
	}
	return false
}

// parentDenies applies a denying parent verdict (rules 2 and 3): it
// reports whether the Allow is answered.
func (st *step) parentDenies() bool {
	pv := st.c.Parent
	if !pv.Denies() {
		return false
	}
	st.res.Decision = pb.Decision_DECISION_DENIED_PARENT_OPEN
	switch {
	case pv.Until == 0:
	case st.now < pv.Until:
		st.res.RetryAfter = pv.Until - st.now
	default:
		st.res.ParentDue = true
	}
	return true
}
