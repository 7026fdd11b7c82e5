package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/outage"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// OutageMode says what Allow and Record answer while Redis is unreachable.
type OutageMode int

const (
	// OutageMemory (the default) answers from this daemon's in-memory
	// breakers, running the same state machine as the scripts
	// (internal/breaker) and fed by every worker connected to this daemon,
	// so the quorum still means two workers. Each answer says degraded.
	// They start from the last state this daemon heard for each breaker
	// (ObserveEvent) or listed from Redis (ObserveStates), so a breaker
	// forced open stays denied. When Redis
	// answers again its state wins: what was counted in memory is dropped.
	OutageMemory OutageMode = iota
	// OutageUnavailable fails each call with an error (gRPC Unavailable):
	// every worker's client then applies its own fallback (fail open to a
	// local breaker, or fail closed).
	OutageUnavailable
)

// OutageTimeouts is outage.Timeouts: how many decision scripts in a row
// failing without a word mean a Redis node is away.
const OutageTimeouts = outage.Timeouts

// ErrUnseeded is outage.ErrUnseeded: a call for a breaker whose node is in
// an outage that began before the memory was seeded (Options.Heard).
var ErrUnseeded = outage.ErrUnseeded

// The outage memory (what a daemon answers while a Redis node is out) is
// internal/outage; the store routes each breaker to its node, polls a
// node in an outage, and words the answers the node's table gives.

// Degraded reports whether the store answers any breaker from memory
// because a Redis node is unreachable.
func (s *Store) Degraded() bool { return s.out.Degraded() }

// Close stops the store's background work (the recovery polls during an
// outage); no outage begins from then on, so a call cut off by closing
// the Redis client after it is not taken for Redis failing. It does not
// close the Redis client.
func (s *Store) Close() { s.out.Close() }

// ObserveEvent remembers the state an event left its breaker in, to start
// the in-memory breakers from if Redis goes away. The daemon feeds it every
// event its hub hears (events.Hub.Observe); it never blocks for long.
func (s *Store) ObserveEvent(e *pb.Event) { s.out.Observe(e) }

// ListSeeding is List (every breaker) that also seeds the outage memory
// with the state Redis holds for each breaker (ObserveStates), so that
// memory does not depend on whether this daemon was running when a
// breaker last changed. A listing any part of which came from memory
// (an outage during it) seeds nothing; one begun once the event feed was
// live (Options.Heard) marks the memory seeded (Seeded).
//
// The first seeding reads every breaker at once, as fast as Redis
// answers. Once the memory is seeded, a listing is paced (batchGetPaced):
// it yields Redis to the decisions beside it, and each piece seeds as
// soon as it is read, so that no state it read is held back while events
// move the breaker on (a close event drops a seed, which an older state
// of the listing would otherwise restore).
func (s *Store) ListSeeding(ctx context.Context) ([]*pb.BreakerState, error) {
	live := s.feedLive()
	entered, fromRedis := s.out.Listing() // read in one step with an outage's beginning
	if s.out.Seeded() {
		return s.list(ctx, func(ctx context.Context, names []string) ([]*pb.BreakerState, error) {
			return s.batchGetPaced(ctx, names, func(piece []*pb.BreakerState) {
				if fromRedis {
					s.out.Seed(entered, piece, live)
				}
				if s.pieceSeeded != nil {
					s.pieceSeeded(piece)
				}
			})
		}, nil)
	}
	all, err := s.list(ctx, s.listed, nil)
	if err != nil || !fromRedis {
		return all, err
	}
	if s.out.Seed(entered, all, live) && s.o.Heard != nil {
		s.log().Info(SeededLog, "breakers", len(all))
	}
	return all, nil
}

// SeededLog is the line a store with Options.Heard logs once, when its
// first listing seeded its memory.
const SeededLog = "listed every breaker: a Redis node that goes away from now on is answered for from memory"

// Seeded reports whether the outage memory answers: always without
// Options.Heard, else once a listing seeded it (ListSeeding).
func (s *Store) Seeded() bool { return s.o.Heard == nil || s.out.Seeded() }

// feedLive reports whether the event feed is live (Options.Heard).
func (s *Store) feedLive() bool {
	if s.o.Heard == nil {
		return true
	}
	select {
	case <-s.o.Heard():
		return true
	default:
		return false
	}
}

// ObserveStates remembers the states Redis holds (a List), as
// ObserveEvent does an event's, but never over a seed of a newer
// generation (an event heard while the listing was read): a breaker
// listed not closed is seeded, one listed closed loses its seed.
func (s *Store) ObserveStates(states []*pb.BreakerState) { s.out.ObserveStates(states) }

// outageNow is the in-memory breakers' clock: the pinned script clock in
// tests, else this host's.
func (s *Store) outageNow() int64 {
	if s.o.Now != nil {
		return s.o.Now().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// nodeAddr returns the address of the Redis node that holds name's keys:
// on a Cluster, the master of their slot as the client last read the
// slots (no round trip); "" for a single Redis, or when the slots cannot
// be read.
func (s *Store) nodeAddr(ctx context.Context, name string) string {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	m, err := cc.MasterForKey(ctx, KeysOf(name).State)
	if err != nil {
		return ""
	}
	return m.Options().Addr
}

// nodeOf returns the node that holds name's keys.
func (s *Store) nodeOf(ctx context.Context, name string) *outage.Node {
	return s.out.Node(s.nodeAddr(ctx, name))
}

// enterOutage sends n's breakers to memory (outage.Memory.Enter), seeded
// with what this daemon last heard of each of them; name's call found n
// away with cause. The decisions still outstanding on n are answered
// from memory at once (decisions.release); the outage that begins is
// reported (Options.OnOutage) and polled until n is back (awaitRecovery).
func (s *Store) enterOutage(n *outage.Node, name string, cause error) {
	ctx := context.Background()
	on := func(b string) (int64, bool) {
		if s.nodeAddr(ctx, b) != n.Addr() {
			return 0, false
		}
		return s.Policy(b).Retention().Milliseconds(), true
	}
	s.out.Enter(n, KeysOf(name).State, s.outageNow(), s.o.Heard == nil, on, func() {
		s.dec.release(n)
		if s.o.OnOutage != nil {
			s.o.OnOutage(n.Addr(), true, cause)
		}
		go s.awaitRecovery(n)
	})
}

// awaitRecovery polls n (outage.Memory.AwaitRecovery) until it answers
// (answers) or, on a Cluster, no longer serves any slot (a replica took
// over, and its breakers' calls go there); the outage's end is reported
// (Options.OnOutage).
func (s *Store) awaitRecovery(n *outage.Node) {
	s.out.AwaitRecovery(n, func(ctx context.Context) outage.Poll {
		return s.answers(ctx, n, n.Key())
	}, func() {
		if s.o.OnOutage != nil {
			s.o.OnOutage(n.Addr(), false, nil)
		}
	})
}

// answers asks node n whether it answers within ctx: the one test of a
// node, both for a decision that waits long (ask) and for an outage's
// end. PING on a fresh connection and through the decisions' pipeline
// (pipeAnswers); on a Cluster, a read of key (a key of one of its
// breakers) on a fresh connection. PollGone: a Cluster node that no
// longer serves any slot.
func (s *Store) answers(ctx context.Context, n *outage.Node, key string) outage.Poll {
	c, serves, err := s.nodeClient(ctx, n.Addr())
	switch {
	case err != nil:
		return outage.PollFailed
	case !serves:
		return outage.PollGone
	case probeAnswers(ctx, c, n.Addr(), key) && (n.Addr() != "" || s.pipeAnswers(ctx)):
		return outage.PollAnswered
	}
	return outage.PollFailed
}

// probeAnswers reports whether the node at addr answers through a fresh
// connection of the node's client c (probeClient), when c is one node's
// client.
func probeAnswers(ctx context.Context, c redis.Cmdable, addr, key string) bool {
	if rc, ok := c.(*redis.Client); ok {
		pc := probeClient(rc)
		defer pc.Close()
		c = pc
	}
	return nodeAnswers(ctx, c, addr, key)
}

// nodeAnswers reports whether the node at addr answers through its client
// c. A Cluster master restarted answers PING before the Cluster serves
// its slots again (CLUSTERDOWN to every command with a key, for a second
// or two while it rejoins): its breakers' calls would fail again and flip
// them back to memory, so a Cluster node must answer a read of key, a
// key of its own (EXISTS, in the least-privilege ACL).
func nodeAnswers(ctx context.Context, c redis.Cmdable, addr, key string) bool {
	if addr == "" {
		return c.Ping(ctx).Err() == nil
	}
	return c.Exists(ctx, key).Err() == nil
}

// nodeClient returns a client to the node at addr and whether it still
// serves slots. A single Redis is always its own node. On a Cluster it
// rereads the slots (one CLUSTER SLOTS from any node that answers, which
// also routes later calls to a master promoted since); an error means
// they could not be read.
func (s *Store) nodeClient(ctx context.Context, addr string) (redis.Cmdable, bool, error) {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok || addr == "" {
		return s.rdb, true, nil
	}
	var mu sync.Mutex
	var found *redis.Client
	err := cc.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		if m.Options().Addr == addr {
			mu.Lock()
			found = m
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return found, found != nil, nil
}

// memoryAllow answers an Allow for name from n's memory, or ErrUnseeded.
func (s *Store) memoryAllow(n *outage.Node, name, worker string) (*pb.AllowResponse, error) {
	if !n.Seeded() {
		return nil, fmt.Errorf("store: allow %q: %w", name, ErrUnseeded)
	}
	p := s.Policy(name)
	out := n.Table().Allow(name, worker, s.o.NewToken(), ParamsOf(p, s.o.Rand()), p.Alternatives, s.outageNow(), outage.Suffix)
	out.Degraded = true
	return out, nil
}

// memoryRecord answers a Record from n's memory, or ErrUnseeded.
func (s *Store) memoryRecord(n *outage.Node, in RecordInput) (*pb.RecordResponse, error) {
	name, p := in.Breaker, in.Policy
	if !n.Seeded() {
		return nil, fmt.Errorf("store: record %q: %w", name, ErrUnseeded)
	}
	now := s.outageNow()
	res, v, _ := n.Table().Apply(name, ParamsOf(p, s.o.Rand()), in.Call, now)
	st := stateOf(v, name, p)
	if w := windowMs(p); w > 0 { // the window after the call, as Redis answers
		cur, _ := n.Table().State(name, now)
		t := breaker.WindowOf(cur, w, now)
		st.WindowCalls, st.WindowFailures, st.SlowCalls = t.Calls, t.Fails, t.Slow
	}
	return &pb.RecordResponse{Counted: res.Counted, Note: res.Note.String(), State: st, Degraded: true}, nil
}
