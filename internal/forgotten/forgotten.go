// Package forgotten keeps the breaker states Redis forgot
// (docs/reliability.md, "Redis that forgets"): a Redis restarted without
// persistence, flushed, or evicting breakerd's keys (every one has a TTL,
// so volatile-* policies take them first) answers a breaker this daemon
// heard open as a fresh CLOSED breaker at generation 0. The daemon still
// knows better: it keeps the last state it heard for each breaker (the
// outage memory's seeds). A generation from Redis below the one heard
// means Redis lost that state, as generations only grow while the state
// is kept.
//
// The package judges a loss (Reports.Forgotten), reports each lost
// generation once (Reports.OnLost), and says what a state heard still
// denies (Deny). It reads nothing from Redis: the store asks it with
// what Redis answered and the fleet's clock.
package forgotten

import (
	"sync"

	"github.com/breakerd/breakerd/internal/breaker"
)

// Lost is a breaker whose state Redis forgot: this daemon heard it in a
// state Redis no longer holds.
type Lost struct {
	// Breaker is the breaker's name.
	Breaker string
	// Known is the state this daemon heard it in last (an open period, or
	// an operator's pin).
	Known breaker.State
	// Gen is the generation Redis holds now (0: no state at all).
	Gen int64
}

// KnownState is the public name of the state heard: open, forced_open or
// forced_closed.
func (l Lost) KnownState() string { return l.Known.Public() }

// Pinned reports whether the state heard was an operator's pin, which the
// daemon puts back (Force) rather than waiting out.
func (l Lost) Pinned() bool { return l.Known.Force != "" }

// Suffix ends the reason of an answer this daemon gave for a state Redis
// forgot.
const Suffix = " (breakerd's Redis lost this breaker's state; this daemon still knows it and denies until then)"

// Matters reports whether losing known changes answers at now: an
// enforced open period not over yet, or a pin. (An open period past its
// probe time, or a state of a breaker in shadow mode, may well have
// expired by itself: losing it changes nothing.) now < 0 asks whether it
// may matter at some time.
func Matters(known breaker.State, now int64) bool {
	if known.Shadow != "" {
		return false
	}
	return known.Force != "" || known.Phase == breaker.Open && (now < 0 || now < known.ProbeAt)
}

// Reports remembers which losses were reported, so that each forgotten
// generation is reported once. Use NewReports.
type Reports struct {
	// onLost, when set, is told each loss the first time it is found.
	onLost   func(Lost)
	mu       sync.Mutex
	reported map[string]int64 // breaker -> the generation heard, reported lost
}

// NewReports returns Reports telling onLost (nil: no one) of each loss
// once. onLost must not block.
func NewReports(onLost func(Lost)) *Reports {
	return &Reports{onLost: onLost, reported: map[string]int64{}}
}

// Forgotten compares the generation Redis answered for name with known,
// the state this daemon had heard before it asked: lost when Redis is
// behind it and losing it matters at now. The first time a generation is
// found lost it is reported.
func (r *Reports) Forgotten(name string, known breaker.State, gen, now int64) bool {
	if known.Gen <= gen || !Matters(known, now) {
		return false
	}
	r.mu.Lock()
	first := r.reported[name] != known.Gen
	if first {
		r.reported[name] = known.Gen
	}
	r.mu.Unlock()
	if first && r.onLost != nil {
		r.onLost(Lost{Breaker: name, Known: known, Gen: gen})
	}
	return true
}

// Deny is the denial a state heard, known, still gives worker at now (on
// the fleet's clock): DENIED_OPEN until its probe time, DENIED_FORCED_OPEN
// until the pin is back, with the view it reads as. ok false: it lets the
// call through, or its probe is due.
func Deny(known breaker.State, worker string, now int64) (breaker.Result, breaker.View, bool) {
	v := breaker.ViewOf(known, now)
	vd := v.Verdict(breaker.Query{Worker: worker, Now: now})
	if !vd.Holds() {
		return breaker.Result{}, v, false
	}
	return breaker.Result{Decision: vd.Decision, RetryAfter: vd.RetryAfter(now)}, v, true
}
