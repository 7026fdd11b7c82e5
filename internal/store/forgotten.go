package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/policy"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Redis that forgets (docs/reliability.md, "Redis that forgets"): a Redis
// restarted without persistence, flushed, or evicting breakerd's keys
// (every one has a TTL, so volatile-* policies take them first) answers a
// breaker this daemon heard open as a fresh CLOSED breaker at generation
// 0. The daemon still knows better: ObserveEvent keeps the last state it
// heard for each breaker (the outage seeds). A generation from Redis below
// the one heard means Redis lost that state, as generations only grow
// while the state is kept.

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

// lostSuffix ends the reason of an Allow this daemon denied for a state
// Redis forgot.
const lostSuffix = " (breakerd's Redis lost this breaker's state; this daemon still knows it and denies until then)"

// forgetting remembers which losses were reported, so that each forgotten
// generation is reported once.
type forgetting struct {
	mu       sync.Mutex
	reported map[string]int64 // breaker -> the generation heard, reported lost
}

// matters reports whether losing known changes answers at now: an
// enforced open period not over yet, or a pin. (An open period past its
// probe time, or a state of a breaker in shadow mode, may well have
// expired by itself: losing it changes nothing.) now < 0 asks whether it
// may matter at some time.
func matters(known breaker.State, now int64) bool {
	if known.Shadow != "" {
		return false
	}
	return known.Force != "" || known.Phase == breaker.Open && (now < 0 || now < known.ProbeAt)
}

// heard returns the state this daemon heard name in last, when losing it
// may matter. It is read before Redis is asked: a state heard while the
// call is in flight (a transition made after the script ran, whose event
// arrives before the script's reply) is newer than Redis's answer and says
// nothing of a loss.
func (s *Store) heard(name string) (breaker.State, bool) {
	o := s.out
	o.mu.Lock()
	known, ok := o.seeds[name]
	o.mu.Unlock()
	return known, ok && matters(known, -1)
}

// fleetNow is the fleet's clock (Redis TIME, or the pinned one), read only
// once a loss is suspected; this host's when Redis does not answer.
func (s *Store) fleetNow(ctx context.Context) int64 {
	if s.o.Now != nil {
		return s.o.Now().UnixMilli()
	}
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return time.Now().UnixMilli()
	}
	return t.UnixMilli()
}

// forgotten compares the generation Redis answered for name with known,
// the state this daemon had heard before it asked: lost when Redis is
// behind it and losing it matters at now. The first time a generation is
// found lost it is reported (Options.OnLost).
func (s *Store) forgotten(name string, known breaker.State, gen, now int64) bool {
	if known.Gen <= gen || !matters(known, now) {
		return false
	}
	f := s.fg
	f.mu.Lock()
	first := f.reported[name] != known.Gen
	if first {
		f.reported[name] = known.Gen
	}
	f.mu.Unlock()
	if first && s.o.OnLost != nil {
		s.o.OnLost(Lost{Breaker: name, Known: known, Gen: gen})
	}
	return true
}

// guard answers an Allow that Redis let through at generation gen, older
// than known, the state this daemon had heard before it asked (heard
// false: none whose loss matters), and still denying at now: the denial
// that state gives (DENIED_OPEN until its probe time, DENIED_FORCED_OPEN
// until the pin is back), judged on the fleet's clock. ok false: Redis's
// answer stands. Only a suspected loss costs a round trip (TIME).
func (s *Store) guard(ctx context.Context, name, worker string, known breaker.State, heard bool, gen int64, p policy.Policy) (*pb.AllowResponse, bool) {
	if !heard || known.Gen <= gen {
		return nil, false
	}
	now := s.fleetNow(ctx)
	if !s.forgotten(name, known, gen, now) {
		return nil, false
	}
	v := breaker.ViewOf(known, now)
	vd := v.Verdict(breaker.Query{Worker: worker, Now: now})
	if !vd.Denied() || vd.Due {
		return nil, false
	}
	out := AllowAnswer(name, worker, breaker.Result{Decision: vd.Decision, RetryAfter: vd.RetryAfter(now)}, v, "", stateOf(v, name, p), breaker.Parent{})
	out.Reason += lostSuffix
	return out, true
}

// FindLost reads every breaker this daemon heard in a state whose loss
// matters (an open period not over, a pin) and returns those Redis no
// longer holds, reporting each newly found one (Options.OnLost). The
// daemon calls it when its health check sees Redis come back (a restart,
// a failover, an outage's end). One pipelined round trip of read.lua; it
// never writes.
func (s *Store) FindLost(ctx context.Context) ([]Lost, error) {
	now := s.fleetNow(ctx)
	o := s.out
	o.mu.Lock()
	var names []string
	var knowns []breaker.State // read before Redis is asked (see heard)
	for name, known := range o.seeds {
		if matters(known, now) {
			names = append(names, name)
			knowns = append(knowns, known)
		}
	}
	o.mu.Unlock()
	states, err := s.batchRead(ctx, names)
	if err != nil {
		return nil, fmt.Errorf("store: find lost states: %w", err)
	}
	var out []Lost
	for i, st := range states {
		if s.forgotten(names[i], knowns[i], st.GetGeneration(), now) {
			out = append(out, Lost{Breaker: names[i], Known: knowns[i], Gen: st.GetGeneration()})
		}
	}
	return out, nil
}

// RaiseLost raises the state_lost alert for l (lost.lua) on behalf of
// actor (the daemon), with reason saying what follows. raised is false
// when another daemon raised it already, or Redis holds that state again.
func (s *Store) RaiseLost(ctx context.Context, l Lost, actor, reason string) (raised bool, err error) {
	p := s.Policy(l.Breaker)
	args := append(s.common(l.Breaker, actor, p, 4), l.Known.Gen, l.KnownState(), l.Known.Cooldown, reason)
	res, err := s.script(ctx, lostScript, keys(l.Breaker), args)
	if err != nil {
		return false, fmt.Errorf("store: raise state_lost for %q: %w", l.Breaker, err)
	}
	r := reply{v: res}
	n := r.int(0)
	if err := r.errOr(); err != nil {
		return false, fmt.Errorf("store: raise state_lost for %q: %w", l.Breaker, err)
	}
	return n == 1, nil
}
