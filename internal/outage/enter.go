package outage

import (
	"context"
	"time"

	"github.com/breakerd/breakerd/internal/breaker"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Listing begins a listing that may seed the memory (Seed): it returns
// the count of outages begun so far and whether no node is in one (the
// listing then comes from Redis alone), read in one step with an
// outage's beginning.
func (m *Memory) Listing() (entered int64, fromRedis bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.entered.Load(), m.downs.Load() == 0
}

// Seed seeds the memory with the states a listing begun at entered
// (Listing) read from Redis, unless an outage began meanwhile (it copied
// the seeds already). live says the listing began once the event feed
// was live: the memory is then seeded, and first reports the first time.
func (m *Memory) Seed(entered int64, states []*pb.BreakerState, live bool) (first bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entered.Load() != entered {
		return false
	}
	m.observeStates(states)
	return live && m.seeded.CompareAndSwap(false, true)
}

// Seeded reports whether a listing seeded the memory (Seed).
func (m *Memory) Seeded() bool { return m.seeded.Load() }

// Enter sends n's breakers to memory: its table is seeded with what this
// daemon last heard of each breaker for which retention (the breaker's
// state retention, ms) says it is on n, at now; key is a key of the
// breaker whose call found n away (Node.Key). The outage's calls are
// answered from memory (Node.Seeded) when always, or once Seed seeded it.
// begun is called, with n's lock held, when this call began the outage
// (not when one is already beginning or on): the store reports it and
// starts AwaitRecovery. n's breakers are seeded before its calls go to
// memory (Down), and its table is kept after the outage ends, until the
// next: a call answered from an unseeded table would let one through at a
// breaker known to be open. A closed memory enters no outage: a call cut
// off by its daemon's shutdown (the Redis client closed under it) is no
// news of Redis.
func (m *Memory) Enter(n *Node, key string, now int64, always bool, retention func(name string) (int64, bool), begun func()) {
	n.mu.Lock() // the calls judged meanwhile wait for the seeding, then see down
	defer n.mu.Unlock()
	if n.entering || m.isClosed() {
		return
	}
	n.entering = true
	n.key = key
	// What the last outage counted is dropped here, not when it ended: a
	// call that saw it on may still be answered from it.
	n.table.Reset()
	m.mu.Lock()
	m.entered.Add(1)
	m.downs.Add(1)
	for name, st := range m.seeds {
		if r, ok := retention(name); ok {
			n.table.Seed(name, st, now, r)
		}
	}
	n.seeded.Store(always || m.seeded.Load())
	m.mu.Unlock()
	n.down.Store(true)
	begun()
}

// Poll is what one recovery poll of a node found.
type Poll int

const (
	// PollFailed: the node did not answer.
	PollFailed Poll = iota
	// PollAnswered: the node answered.
	PollAnswered
	// PollGone: the node no longer serves any slot (a replica took over,
	// and its breakers' calls go there).
	PollGone
)

// AwaitRecovery polls n (poll, bounded by RecoveryPoll) every RecoveryPoll
// until it answers RecoveryAnswers times in a row or is gone, then hands
// its decisions back to Redis, whose state wins (what was counted in
// memory is dropped when the next outage begins), and calls left. It
// returns early, leaving n in its outage, once the memory is closed.
func (m *Memory) AwaitRecovery(n *Node, poll func(context.Context) Poll, left func()) {
	t := time.NewTicker(RecoveryPoll)
	defer t.Stop()
	answers := 0
	for answers < RecoveryAnswers {
		select {
		case <-m.closed:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), RecoveryPoll)
		switch poll(ctx) {
		case PollFailed:
			answers = 0
		case PollGone:
			answers = RecoveryAnswers
		case PollAnswered:
			answers++
		}
		cancel()
	}
	n.mu.Lock()
	n.down.Store(false)
	n.timeouts.Store(0)
	n.entering = false
	n.mu.Unlock()
	m.downs.Add(-1)
	left()
}

// seedFacts are what an event or a listed state says of the state its
// breaker is in, as far as a seed needs: the state, its generation, when
// it began (the circuit opened), its open period, its reason, who forced
// it, and whether it is shadowed.
type seedFacts struct {
	to                pb.State
	gen, at, cooldown int64
	reason, actor     string
	shadow            bool
}

// SeedOf turns an event into the state it left its breaker in: the state
// an in-memory breaker starts from (false: none needed, closed).
func SeedOf(e *pb.Event) (breaker.State, bool) {
	return seed(seedFacts{to: e.GetTo(), gen: e.GetGeneration(), at: e.GetAtMs(), cooldown: e.GetCooldownMs(),
		reason: e.GetReason(), actor: e.GetActor(), shadow: e.GetShadow()})
}

// seedOfState turns a listed state into a seed. A shadowed breaker lists
// closed, the state it would be in as shadow_state: that one is seeded.
func seedOfState(bs *pb.BreakerState) (breaker.State, bool) {
	to := bs.GetState()
	if bs.GetShadow() {
		to = bs.GetShadowState()
	}
	return seed(seedFacts{to: to, gen: bs.GetGeneration(), at: bs.GetOpenedAtMs(), cooldown: bs.GetCooldownMs(),
		reason: bs.GetReason(), actor: bs.GetForcedBy(), shadow: bs.GetShadow()})
}

// seed turns what is known of a breaker's state into the state an
// in-memory breaker starts from; a closed breaker needs no seed. A
// shadowed breaker seeds one shadowed (setting "on"): the state it would
// be in is computed in memory too, never enforced.
func seed(f seedFacts) (breaker.State, bool) {
	st := breaker.State{Gen: f.gen, Cause: breaker.CauseOutage, Last: f.reason}
	if f.shadow {
		st.Shadow = "on"
	}
	switch f.to {
	case pb.State_STATE_FORCED_OPEN:
		return breaker.State{Gen: f.gen, Force: "open", ForceReason: f.reason, ForceBy: f.actor}, true
	case pb.State_STATE_FORCED_CLOSED:
		return breaker.State{Gen: f.gen, Force: "closed", ForceReason: f.reason, ForceBy: f.actor}, true
	case pb.State_STATE_OPEN:
		st.Phase, st.Opened, st.Cooldown = breaker.Open, f.at, f.cooldown
		st.ProbeAt = f.at + f.cooldown
		return st, true
	case pb.State_STATE_HALF_OPEN: // a probe was due: the next call probes
		st.Phase, st.Opened, st.ProbeAt = breaker.Open, f.at, f.at
		return st, true
	case pb.State_STATE_PAUSED:
		st.Phase = breaker.Paused
		return st, true
	}
	return breaker.State{}, false
}
