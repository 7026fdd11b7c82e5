package store

import (
	"context"
	"fmt"
	"time"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/forgotten"
	"github.com/breakerd/breakerd/internal/policy"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Redis that forgets: internal/forgotten judges a state Redis lost; the
// store reads what it heard (heard, the outage memory's seeds) and what
// Redis holds (batchRead, the fleet's clock) and raises the alert
// (lost.lua).

// heard returns the state this daemon heard name in last, when losing it
// may matter. It is read before Redis is asked: a state heard while the
// call is in flight (a transition made after the script ran, whose event
// arrives before the script's reply) is newer than Redis's answer and says
// nothing of a loss.
func (s *Store) heard(name string) (breaker.State, bool) {
	known, ok := s.out.Heard(name)
	return known, ok && forgotten.Matters(known, -1)
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

// forgotten is Reports.Forgotten: whether name's state heard, known, is
// one Redis lost (it answered gen) that matters at now, reported once.
func (s *Store) forgotten(name string, known breaker.State, gen, now int64) bool {
	return s.fg.Forgotten(name, known, gen, now)
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
	// The fleet's clock is read within the call's decision bound: a Redis
	// that stalls just after the script answered leaves this host's clock.
	tctx, cancel := s.WithinDecision(ctx)
	now := s.fleetNow(tctx)
	cancel()
	if !s.forgotten(name, known, gen, now) {
		return nil, false
	}
	res, v, denies := forgotten.Deny(known, worker, now)
	if !denies {
		return nil, false
	}
	out := AllowAnswer(name, worker, res, v, "", stateOf(v, name, p), breaker.Parent{})
	out.Reason += forgotten.Suffix
	return out, true
}

// FindLost reads every breaker this daemon heard in a state whose loss
// matters (an open period not over, a pin) and returns those Redis no
// longer holds, reporting each newly found one (Options.OnLost). The
// daemon calls it when its health check sees Redis come back (a restart,
// a failover, an outage's end). One pipelined round trip of read.lua; it
// never writes.
func (s *Store) FindLost(ctx context.Context) ([]forgotten.Lost, error) {
	now := s.fleetNow(ctx)
	names, knowns := s.out.HeardWhere(func(known breaker.State) bool { // read before Redis is asked (see heard)
		return forgotten.Matters(known, now)
	})
	states, err := s.batchRead(ctx, names, false)
	if err != nil {
		return nil, fmt.Errorf("store: find lost states: %w", err)
	}
	var out []forgotten.Lost
	for i, st := range states {
		if s.forgotten(names[i], knowns[i], st.GetGeneration(), now) {
			out = append(out, forgotten.Lost{Breaker: names[i], Known: knowns[i], Gen: st.GetGeneration()})
		}
	}
	return out, nil
}

// RaiseLost raises the state_lost alert for l (lost.lua) on behalf of
// actor (the daemon), with reason saying what follows. raised is false
// when another daemon raised it already, or Redis holds that state again.
func (s *Store) RaiseLost(ctx context.Context, l forgotten.Lost, actor, reason string) (raised bool, err error) {
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
