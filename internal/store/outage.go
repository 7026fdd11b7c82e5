package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/breaker"
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

// OutageTimeouts is how many decision scripts in a row failing without
// a word (a timeout, a stall past the decision timeout, a "not now"
// reply) mean a Redis node is away: a single slow command on a loaded
// machine is not an outage.
const OutageTimeouts = 3

// recoveryPoll is how often a daemon asks a node in an outage whether it
// is back (nodeAnswers), so it returns within a second of the node answering.
const recoveryPoll = 200 * time.Millisecond

// recoveryAnswers is how many times in a row a node in an outage must
// answer (nodeAnswers) before decisions go back to it: with the refused connection
// that starts an outage at once, this is the hysteresis that keeps a node
// answering now and then (a restart loop, a flaky link) from flipping its
// breakers between memory and Redis on every call.
const recoveryAnswers = 3

// maxSeeds bounds the breakers whose last heard state is kept for an
// outage.
const maxSeeds = 100_000

// outage is a daemon's memory of the fleet for when Redis is away, judged
// per node: a single Redis (or Sentinel's master) is one node; on a Redis
// Cluster each master is one, so that one dead master sends only its own
// breakers to memory and the breakers on live masters keep answering from
// Redis.
type outage struct {
	closed chan struct{}
	once   sync.Once
	// downs counts the nodes in an outage; entered, the outages begun.
	downs   atomic.Int32
	entered atomic.Int64
	// nodes are the nodes calls went to, by address ("" for a single
	// Redis, or a Cluster whose slots cannot be read): *node.
	nodes sync.Map

	// mu guards seeds, and makes an outage's beginning (entered, downs,
	// the copy of seeds) one step as a listing sees it (ListSeeding).
	mu    sync.Mutex
	seeds map[string]breaker.State
	// seeded is set once a listing seeded the memory (Options.Heard).
	seeded atomic.Bool
}

// ErrUnseeded is the error of a call (and a read) for a breaker whose
// Redis node is in an outage that began before this daemon's memory was
// seeded (Options.Heard): Redis could not serve it (IsUnavailable), and
// memory is not asked, since it may not know a breaker forced or
// tripped before the daemon started.
var ErrUnseeded = errors.New("store: redis unreachable before this daemon's first listing of its breakers: not answered from memory")

// node is one Redis node as the outage detection sees it.
type node struct {
	addr string
	// mu guards entering, set from the moment an outage of the node
	// begins (its breakers being seeded) until it ends; down is set once
	// they are seeded, while calls are answered from memory.
	mu       sync.Mutex
	entering bool
	down     atomic.Bool
	// seeded says whether the memory was seeded when the outage began
	// (Store.Seeded): calls are answered from it only then.
	seeded   atomic.Bool
	timeouts atomic.Int32
	// sent numbers the decisions sent to the node; failedAt is the number
	// of the latest one judged a failure. An answer resets timeouts only
	// when its decision was sent after that one: "in a row" is in the
	// order decisions were sent, whatever order a busy host judges them in.
	sent, failedAt atomic.Int64
	table          *breaker.Table
	// key is a key of the breaker whose call began the node's outage:
	// on a Cluster, the recovery poll asks for it (written before the
	// poll starts, read only by it).
	key string
}

func newOutage() *outage {
	return &outage{closed: make(chan struct{}), seeds: map[string]breaker.State{}}
}

// Degraded reports whether the store answers any breaker from memory
// because a Redis node is unreachable.
func (s *Store) Degraded() bool { return s.out.downs.Load() > 0 }

// Close stops the store's background work (the recovery polls during an
// outage). It does not close the Redis client.
func (s *Store) Close() { s.out.once.Do(func() { close(s.out.closed) }) }

// ObserveEvent remembers the state an event left its breaker in, to start
// the in-memory breakers from if Redis goes away. The daemon feeds it every
// event its hub hears (events.Hub.Observe); it never blocks for long.
func (s *Store) ObserveEvent(e *pb.Event) {
	if e.GetKind() == pb.EventKind_EVENT_KIND_STATE_LOST {
		return // an alert about a state heard before: not a state of its own
	}
	name := e.GetBreaker()
	st, keep := seedOf(e)
	o := s.out
	o.mu.Lock()
	defer o.mu.Unlock()
	if !keep {
		delete(o.seeds, name)
		return
	}
	if _, known := o.seeds[name]; known || len(o.seeds) < maxSeeds {
		o.seeds[name] = st
	}
}

// ListSeeding is List (every breaker) that also seeds the outage memory
// with the state Redis holds for each breaker (ObserveStates), so that
// memory does not depend on whether this daemon was running when a
// breaker last changed. A listing any part of which came from memory
// (an outage during it) seeds nothing; one begun once the event feed was
// live (Options.Heard) marks the memory seeded (Seeded).
func (s *Store) ListSeeding(ctx context.Context) ([]*pb.BreakerState, error) {
	live := s.feedLive()
	o := s.out
	o.mu.Lock() // an outage begins in one step under mu (enterOutage)
	entered, fromRedis := o.entered.Load(), o.downs.Load() == 0
	o.mu.Unlock()
	all, err := s.List(ctx)
	if err != nil || !fromRedis {
		return all, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.entered.Load() == entered { // else an outage copied seeds meanwhile
		o.observeStates(all)
		if live && o.seeded.CompareAndSwap(false, true) && s.o.Heard != nil {
			s.log().Info(SeededLog, "breakers", len(all))
		}
	}
	return all, nil
}

// SeededLog is the line a store with Options.Heard logs once, when its
// first listing seeded its memory.
const SeededLog = "listed every breaker: a Redis node that goes away from now on is answered for from memory"

// Seeded reports whether the outage memory answers: always without
// Options.Heard, else once a listing seeded it (ListSeeding).
func (s *Store) Seeded() bool { return s.o.Heard == nil || s.out.seeded.Load() }

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
func (s *Store) ObserveStates(states []*pb.BreakerState) {
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	s.out.observeStates(states)
}

// observeStates is ObserveStates with o.mu held.
func (o *outage) observeStates(states []*pb.BreakerState) {
	for _, bs := range states {
		name := bs.GetBreaker()
		st, keep := seedOfState(bs)
		old, known := o.seeds[name]
		switch {
		case known && old.Gen > bs.GetGeneration():
		case !keep:
			delete(o.seeds, name)
		case known || len(o.seeds) < maxSeeds:
			o.seeds[name] = st
		}
	}
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

// seedOf turns an event into the state it left its breaker in (seed).
func seedOf(e *pb.Event) (breaker.State, bool) {
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
func (s *Store) nodeOf(ctx context.Context, name string) *node {
	addr := s.nodeAddr(ctx, name)
	if n, ok := s.out.nodes.Load(addr); ok {
		return n.(*node)
	}
	n, _ := s.out.nodes.LoadOrStore(addr, &node{addr: addr, table: breaker.NewTable()})
	return n.(*node)
}

// connectionLost tells an error that says Redis cannot be reached at all.
func connectionLost(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	var oe *net.OpError
	return errors.As(err, &oe) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, redis.ErrClosed)
}

// enterOutage sends n's breakers to memory, seeded with what this daemon
// last heard of each of them; name's call found n away.
// n's breakers are seeded before its calls go to memory (down), and its
// table is kept after the outage ends, until the next: a call answered
// from an unseeded table would let one through at a breaker known to be
// open.
func (s *Store) enterOutage(n *node, name string) {
	n.mu.Lock() // the calls judged meanwhile wait for the seeding, then see down
	defer n.mu.Unlock()
	if n.entering {
		return
	}
	n.entering = true
	n.key = KeysOf(name).State
	// What the last outage counted is dropped here, not when it ended: a
	// call that saw it on may still be answered from it.
	n.table.Reset()
	now := s.outageNow()
	ctx := context.Background()
	s.out.mu.Lock()
	s.out.entered.Add(1)
	s.out.downs.Add(1)
	for name, st := range s.out.seeds {
		if s.nodeAddr(ctx, name) == n.addr {
			n.table.Seed(name, st, now, s.Policy(name).Retention().Milliseconds())
		}
	}
	n.seeded.Store(s.Seeded())
	s.out.mu.Unlock()
	n.down.Store(true)
	if s.o.OnOutage != nil {
		s.o.OnOutage(n.addr, true)
	}
	go s.awaitRecovery(n)
}

// awaitRecovery polls n until it answers recoveryAnswers times in a row
// (answers: PING on a fresh connection, and through the decisions'
// pipeline, pipeAnswers; on a Cluster, a read of the key of the breaker
// that began the outage) or, on a Cluster, no longer serves any slot (a
// replica took over, and its breakers' calls go there), then hands its
// decisions back to Redis, whose state wins (what was counted in memory
// is dropped when the next outage begins).
func (s *Store) awaitRecovery(n *node) {
	t := time.NewTicker(recoveryPoll)
	defer t.Stop()
	answers := 0
	for answers < recoveryAnswers {
		select {
		case <-s.out.closed:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), recoveryPoll)
		c, serves, err := s.nodeClient(ctx, n.addr)
		switch {
		case err != nil:
			answers = 0
		case !serves:
			answers = recoveryAnswers
		case probeAnswers(ctx, c, n) && (n.addr != "" || s.pipeAnswers(ctx)):
			answers++
		default:
			answers = 0
		}
		cancel()
	}
	n.mu.Lock()
	n.down.Store(false)
	n.timeouts.Store(0)
	n.entering = false
	n.mu.Unlock()
	s.out.downs.Add(-1)
	if s.o.OnOutage != nil {
		s.o.OnOutage(n.addr, false)
	}
}

// probeAnswers reports whether node n answers through a fresh connection
// of the node's client c (probeClient), when c is one node's client.
func probeAnswers(ctx context.Context, c redis.Cmdable, n *node) bool {
	if rc, ok := c.(*redis.Client); ok {
		pc := probeClient(rc)
		defer pc.Close()
		c = pc
	}
	return nodeAnswers(ctx, c, n)
}

// nodeAnswers reports whether node n answers through its client c. A
// Cluster master restarted answers PING before the Cluster serves its
// slots again (CLUSTERDOWN to every command with a key, for a second or
// two while it rejoins): its breakers' calls would fail again and flip
// them back to memory, so a Cluster node must answer a read of a key of
// its own (EXISTS, in the least-privilege ACL).
func nodeAnswers(ctx context.Context, c redis.Cmdable, n *node) bool {
	if n.addr == "" {
		return c.Ping(ctx).Err() == nil
	}
	return c.Exists(ctx, n.key).Err() == nil
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

// outageSuffix ends every reason given from memory.
const outageSuffix = " (breakerd cannot reach its Redis: judged by this daemon alone)"

// memoryAllow answers an Allow for name from n's memory, or ErrUnseeded.
func (s *Store) memoryAllow(n *node, name, worker string) (*pb.AllowResponse, error) {
	if !n.seeded.Load() {
		return nil, fmt.Errorf("store: allow %q: %w", name, ErrUnseeded)
	}
	p := s.Policy(name)
	out := n.table.Allow(name, worker, s.o.NewToken(), ParamsOf(p, s.o.Rand()), p.Alternatives, s.outageNow(), outageSuffix)
	out.Degraded = true
	return out, nil
}

// memoryRecord answers a Record from n's memory, or ErrUnseeded.
func (s *Store) memoryRecord(n *node, in RecordInput) (*pb.RecordResponse, error) {
	name, p := in.Breaker, in.Policy
	if !n.seeded.Load() {
		return nil, fmt.Errorf("store: record %q: %w", name, ErrUnseeded)
	}
	now := s.outageNow()
	res, v, _ := n.table.Apply(name, ParamsOf(p, s.o.Rand()), in.Call, now)
	st := stateOf(v, name, p)
	if w := windowMs(p); w > 0 { // the window after the call, as Redis answers
		cur, _ := n.table.State(name, now)
		t := breaker.WindowOf(cur, w, now)
		st.WindowCalls, st.WindowFailures, st.SlowCalls = t.Calls, t.Fails, t.Slow
	}
	return &pb.RecordResponse{Counted: res.Counted, Note: res.Note.String(), State: st, Degraded: true}, nil
}
