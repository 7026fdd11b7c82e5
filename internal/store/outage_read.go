package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/forgotten"
	"github.com/breakerd/breakerd/internal/outage"
	"github.com/breakerd/breakerd/internal/policy"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// What operators read (Get, BatchGet, List, the HTTP stream's snapshot)
// agrees with what Allow answers. While a Redis node is away, Allow
// answers its breakers from this daemon's memory (internal/outage): so do the
// reads, each reason ending with outage.Suffix. A state Redis lost that
// this daemon still denies by (internal/forgotten) reads as that state, its
// reason ending with forgotten.Suffix. docs/reliability.md, "What operators
// see while Redis is away", tells it for operators.

// BatchGet returns the states of the named breakers, in order, as Allow
// judges them: what Redis holds, in one pipelined round trip; for a
// breaker whose Redis node is in an outage, what this daemon's memory
// holds (no round trip; ErrUnseeded before it is seeded, as Allow); for
// one whose state Redis lost while this daemon still denies by it, that
// state. It never writes.
func (s *Store) BatchGet(ctx context.Context, breakers []string) ([]*pb.BreakerState, error) {
	return s.batchGet(ctx, breakers, false)
}

// listed is BatchGet for a listing: a breaker whose key holds a value
// breakerd did not write is left out, with a warning (batchRead), and
// the others are returned, in order.
func (s *Store) listed(ctx context.Context, breakers []string) ([]*pb.BreakerState, error) {
	return s.batchGet(ctx, breakers, true)
}

// batchGet is BatchGet, leaving out what batchRead leaves out with
// leaveOut.
func (s *Store) batchGet(ctx context.Context, breakers []string, leaveOut bool) ([]*pb.BreakerState, error) {
	if len(breakers) == 0 {
		return nil, nil
	}
	out := make([]*pb.BreakerState, len(breakers))
	var ask []string
	var at []int
	set := s.policies.Load()
	for i, b := range breakers {
		if n := s.downNodeOf(ctx, b); n != nil {
			if !n.Seeded() { // as Allow: not answered from memory
				return nil, fmt.Errorf("store: get %q: %w", b, ErrUnseeded)
			}
			out[i] = s.memoryState(n, b, set)
			continue
		}
		ask, at = append(ask, b), append(at, i)
	}
	if len(ask) == 0 {
		return out, nil
	}
	knowns := make([]breaker.State, len(ask))
	heards := make([]bool, len(ask))
	for i, b := range ask { // before Redis is asked (see heard)
		knowns[i], heards[i] = s.heard(b)
	}
	states, err := s.batchRead(ctx, ask, leaveOut)
	if err != nil {
		return nil, err
	}
	now := int64(-1) // the fleet's clock, read only once a loss is suspected
	for j, st := range states {
		if st == nil { // left out
			continue
		}
		if heards[j] && knowns[j].Gen > st.GetGeneration() {
			if now < 0 {
				now = s.fleetNow(ctx)
			}
			st = s.lostState(ask[j], knowns[j], st, now, set)
		}
		out[at[j]] = st
	}
	if leaveOut {
		out = slices.DeleteFunc(out, func(st *pb.BreakerState) bool { return st == nil })
	}
	return out, nil
}

// downNodeOf returns name's Redis node when it is in an outage, else nil.
// It costs no round trip (nodeOf reads the slots the client knows).
func (s *Store) downNodeOf(ctx context.Context, name string) *outage.Node {
	if !s.out.Degraded() {
		return nil
	}
	if n := s.nodeOf(ctx, name); n.Down() {
		return n
	}
	return nil
}

// memoryState is name's state as n's in-memory breakers hold it: what
// Allow answers from while n is away.
func (s *Store) memoryState(n *outage.Node, name string, set *policy.Set) *pb.BreakerState {
	p := set.For(name)
	st := stateOf(n.Table().Read(name, s.outageNow()), name, p)
	withGroup(st, groupOf(set, name))
	if st.Reason != "" {
		st.Reason += outage.Suffix
	}
	return st
}

// lostState is the state to show for name, which Redis answered as st
// (read) although this daemon had heard it in known, of a later
// generation: known as it reads at now when Redis lost it
// (forgotten, which reports the loss once), else st.
func (s *Store) lostState(name string, known breaker.State, st *pb.BreakerState, now int64, set *policy.Set) *pb.BreakerState {
	if !s.forgotten(name, known, st.GetGeneration(), now) {
		return st
	}
	p := set.For(name)
	out := stateOf(breaker.Read(known, now), name, p)
	withGroup(out, groupOf(set, name))
	if out.Reason != "" {
		out.Reason += forgotten.Suffix
	}
	return out
}

// memoryPage is ListPage's page for the node nodes[i], which is in an
// outage (n): every breaker its memory holds, filtered by states, in one
// page, and the token of the next node's first page ("" after the last).
func (s *Store) memoryPage(n *outage.Node, states []pb.State, nodes []scanNode, i int) ([]*pb.BreakerState, string, error) {
	if !n.Seeded() {
		return nil, "", fmt.Errorf("store: list %s: %w", cmp.Or(n.Addr(), "redis"), ErrUnseeded)
	}
	set := s.policies.Load()
	var out []*pb.BreakerState
	for _, name := range n.Table().Names(s.outageNow()) {
		if st := s.memoryState(n, name, set); len(states) == 0 || containsState(states, st.State) {
			out = append(out, st)
		}
	}
	if i+1 < len(nodes) {
		return out, encodePageToken(nodes[i+1].addr, 0), nil
	}
	return out, "", nil
}

// listPages is List while a node is away: every page of ListPage (a node
// in an outage answers from memory), each breaker once.
func (s *Store) listPages(ctx context.Context, states []pb.State) ([]*pb.BreakerState, error) {
	var out []*pb.BreakerState
	seen := map[string]bool{} // a page boundary can repeat a breaker (SCAN)
	for token := ""; ; {
		page, next, err := s.ListPage(ctx, token, MaxPageSize, states...)
		if err != nil {
			return nil, err
		}
		for _, st := range page {
			if !seen[st.GetBreaker()] {
				seen[st.GetBreaker()] = true
				out = append(out, st)
			}
		}
		if token = next; token == "" {
			return out, nil
		}
	}
}
