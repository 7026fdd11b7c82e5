// Package outage is a daemon's memory of the fleet for when a Redis node
// is away: what it answers while the node is out. It keeps the last state
// this daemon heard for each breaker (Memory.Observe, Memory.ObserveStates:
// the seeds), judges each node's decision scripts in the order they were
// sent (Node.Judge: a lost connection, or Timeouts failures in a row
// unless the node answered a fresh connection or the daemon itself ran
// late meanwhile, is an outage),
// seeds a node's in-memory breakers (internal/breaker's Table,
// the scripts' state machine) when its outage begins (Memory.Enter), and
// hands its decisions back to Redis once a recovery poll saw it answer
// RecoveryAnswers times in a row (Memory.AwaitRecovery).
//
// Outages are judged per node: a single Redis (or Sentinel's master) is
// one node; on a Redis Cluster each master is one, so that one dead
// master sends only its own breakers to memory and the breakers on live
// masters keep answering from Redis. The package never talks to Redis:
// the store routes a breaker to its node, polls the node for it, and
// words the answers a node's table gives.
package outage

import (
	"errors"
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

// Timeouts is how many decision scripts in a row failing without a word
// (a timeout, a stall past the decision timeout, a "not now" reply) mean
// a Redis node is away: a single slow command on a loaded machine is not
// an outage, nor are decisions that were late on the daemon's side: a
// connection of its pool, while the node answered a fresh connection
// (Node.Ask), or the daemon's own time, while it ran late (Memory.RanLate).
const Timeouts = 3

// RecoveryPoll is how often a daemon asks a node in an outage whether it
// is back, so it returns within a second of the node answering.
const RecoveryPoll = 200 * time.Millisecond

// RecoveryAnswers is how many times in a row a node in an outage must
// answer before decisions go back to it: with the refused connection that
// starts an outage at once, this is the hysteresis that keeps a node
// answering now and then (a restart loop, a flaky link) from flipping its
// breakers between memory and Redis on every call.
const RecoveryAnswers = 3

// maxSeeds bounds the breakers whose last heard state is kept for an
// outage.
const maxSeeds = 100_000

// Suffix ends every reason given from memory.
const Suffix = " (breakerd cannot reach its Redis: judged by this daemon alone)"

// ErrUnseeded is the error of a call (and a read) for a breaker whose
// Redis node is in an outage that began before this daemon's memory was
// seeded (the store's Options.Heard): Redis could not serve it, and
// memory is not asked, since it may not know a breaker forced or tripped
// before the daemon started.
var ErrUnseeded = errors.New("store: redis unreachable before this daemon's first listing of its breakers: not answered from memory")

// Memory is a daemon's memory of the fleet for an outage: the seeds, and
// the nodes calls went to. Use New; Close ends its recovery polls.
type Memory struct {
	closed chan struct{}
	once   sync.Once
	// downs counts the nodes in an outage; entered, the outages begun.
	downs   atomic.Int32
	entered atomic.Int64
	// nodes are the nodes calls went to, by address ("" for a single
	// Redis, or a Cluster whose slots cannot be read): *Node.
	nodes sync.Map

	// mu guards seeds, and makes an outage's beginning (entered, downs,
	// the copy of seeds) one step as a listing sees it (Listing).
	mu    sync.Mutex
	seeds map[string]breaker.State
	// seeded is set once a listing seeded the memory (Seed).
	seeded atomic.Bool
	// late is when the daemon last found itself running late (RanLate,
	// UnixNano): the end of its latest late span.
	late atomic.Int64
}

// New returns an empty Memory.
func New() *Memory {
	return &Memory{closed: make(chan struct{}), seeds: map[string]breaker.State{}}
}

// Closed is closed once the memory is (Close).
func (m *Memory) Closed() <-chan struct{} { return m.closed }

// Close stops the recovery polls; no outage begins from then on (Enter).
func (m *Memory) Close() { m.once.Do(func() { close(m.closed) }) }

// isClosed reports whether Close was called.
func (m *Memory) isClosed() bool {
	select {
	case <-m.closed:
		return true
	default:
		return false
	}
}

// Degraded reports whether any node is in an outage.
func (m *Memory) Degraded() bool { return m.downs.Load() > 0 }

// Node returns the node at addr, made on first use.
func (m *Memory) Node(addr string) *Node {
	if n, ok := m.nodes.Load(addr); ok {
		return n.(*Node)
	}
	n, _ := m.nodes.LoadOrStore(addr, &Node{addr: addr, table: breaker.NewTable(), mem: m})
	return n.(*Node)
}

// RanLate notes that the daemon found itself running late at at: a timer
// of its own fired, or a goroutine of its own started, a good part of a
// decision's bound after it was due (a starved host, a frozen process).
// Every node judges the decisions sent before at as late on the daemon's
// side (Node.Judge): a daemon that cannot keep its own time cannot tell
// Redis's lateness from its own. It returns the end of the late span
// noted before (zero: none), for the caller to say so once per span.
func (m *Memory) RanLate(at time.Time) (before time.Time) {
	for {
		l := m.late.Load()
		if l >= at.UnixNano() || m.late.CompareAndSwap(l, at.UnixNano()) {
			if l == 0 {
				return time.Time{}
			}
			return time.Unix(0, l)
		}
	}
}

// RanLateSince reports whether the daemon ran late (RanLate) at t or after.
func (m *Memory) RanLateSince(t time.Time) bool { return m.late.Load() >= t.UnixNano() }

// DownNode returns the node at addr when it is in an outage, else nil.
func (m *Memory) DownNode(addr string) *Node {
	if m.downs.Load() == 0 {
		return nil
	}
	if n, ok := m.nodes.Load(addr); ok && n.(*Node).down.Load() {
		return n.(*Node)
	}
	return nil
}

// Node is one Redis node as the outage detection sees it.
type Node struct {
	addr string
	// mu guards entering, set from the moment an outage of the node
	// begins (its breakers being seeded) until it ends; down is set once
	// they are seeded, while calls are answered from memory.
	mu       sync.Mutex
	entering bool
	down     atomic.Bool
	// seeded says whether the memory was seeded when the outage began:
	// calls are answered from it only then.
	seeded   atomic.Bool
	timeouts atomic.Int32
	// asking is set while the node is asked on a fresh connection (Ask);
	// asked is when the latest ask began, answered when the latest one it
	// answered did (UnixNano).
	asking          atomic.Bool
	asked, answered atomic.Int64
	// sent numbers the decisions sent to the node; failedAt is the number
	// of the latest one judged a failure. An answer resets timeouts only
	// when its decision was sent after that one: "in a row" is in the
	// order decisions were sent, whatever order a busy host judges them in.
	sent, failedAt atomic.Int64
	table          *breaker.Table
	// mem is the memory the node is of: its word on when the daemon last
	// ran late.
	mem *Memory
	// key is a key of the breaker whose call began the node's outage:
	// on a Cluster, the recovery poll asks for it (written before the
	// poll starts, read only by it).
	key string
}

// Addr is the node's address ("" for a single Redis).
func (n *Node) Addr() string { return n.addr }

// Key is a key of the breaker whose call began the node's outage.
func (n *Node) Key() string { return n.key }

// Down reports whether the node's calls are answered from memory.
func (n *Node) Down() bool { return n.down.Load() }

// Seeded reports whether the memory was seeded when the node's outage
// began: its calls are answered from memory only then (else ErrUnseeded).
func (n *Node) Seeded() bool { return n.seeded.Load() }

// Table is the node's in-memory breakers.
func (n *Node) Table() *breaker.Table { return n.table }

// Send numbers a decision sent to the node, for Judge.
func (n *Node) Send() int64 { return n.sent.Add(1) }

// Judge notes the outcome err of the decision script sent seq-th to n,
// at sent: an answer resets n's count of failures unless a later-sent
// decision already failed; failing says whether err is a failure that
// counts (Redis could not serve it, and the memory answers for it). It
// reports whether the failure begins an outage (Enter): a connection
// that cannot be made or was lost at once, a stall (or a "not now" reply
// such as LOADING) once Timeouts in a row, unless the node answered a
// fresh connection asked after the decision was sent (Ask), or the
// daemon ran late after it was sent (Memory.RanLate): that decision was
// late on the daemon's side.
func (n *Node) Judge(seq int64, sent time.Time, err error, failing bool) (enter bool) {
	switch {
	case err == nil:
		if seq > n.failedAt.Load() {
			n.timeouts.Store(0)
		}
		return false
	case !failing:
		return false
	}
	for f := n.failedAt.Load(); seq > f && !n.failedAt.CompareAndSwap(f, seq); f = n.failedAt.Load() {
	}
	return connectionLost(err) || n.timeouts.Add(1) >= Timeouts && n.answered.Load() < sent.UnixNano() && n.mem.late.Load() < sent.UnixNano()
}

// Ask reports whether n is to be asked on a fresh connection, at now,
// for a decision sent at sent and still outstanding: not while an ask is
// in flight, nor when one begun since sent covers it (answered or not).
// true: the caller asks it now and reports with Asked.
func (n *Node) Ask(sent, now time.Time) bool {
	if n.asked.Load() >= sent.UnixNano() || !n.asking.CompareAndSwap(false, true) {
		return false
	}
	n.asked.Store(now.UnixNano())
	return true
}

// Asked reports the ask begun at began (Ask): whether the node answered.
func (n *Node) Asked(began time.Time, answered bool) {
	defer n.asking.Store(false)
	if !answered {
		return
	}
	for a := n.answered.Load(); a < began.UnixNano() && !n.answered.CompareAndSwap(a, began.UnixNano()); a = n.answered.Load() {
	}
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

// Observe remembers the state an event left its breaker in, to start the
// in-memory breakers from if Redis goes away. It never blocks for long.
func (m *Memory) Observe(e *pb.Event) {
	if e.GetKind() == pb.EventKind_EVENT_KIND_STATE_LOST {
		return // an alert about a state heard before: not a state of its own
	}
	name := e.GetBreaker()
	st, keep := SeedOf(e)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !keep {
		delete(m.seeds, name)
		return
	}
	if _, known := m.seeds[name]; known || len(m.seeds) < maxSeeds {
		m.seeds[name] = st
	}
}

// ObserveStates remembers the states Redis holds (a listing), as Observe
// does an event's, but never over a seed of a newer generation (an event
// heard while the listing was read): a breaker listed not closed is
// seeded, one listed closed loses its seed.
func (m *Memory) ObserveStates(states []*pb.BreakerState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observeStates(states)
}

// observeStates is ObserveStates with m.mu held.
func (m *Memory) observeStates(states []*pb.BreakerState) {
	for _, bs := range states {
		name := bs.GetBreaker()
		st, keep := seedOfState(bs)
		old, known := m.seeds[name]
		switch {
		case known && old.Gen > bs.GetGeneration():
		case !keep:
			delete(m.seeds, name)
		case known || len(m.seeds) < maxSeeds:
			m.seeds[name] = st
		}
	}
}

// Heard returns the state this daemon heard name in last, if any.
func (m *Memory) Heard(name string) (breaker.State, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.seeds[name]
	return st, ok
}

// HeardWhere returns the breakers heard in a state for which keep is
// true, and those states.
func (m *Memory) HeardWhere(keep func(breaker.State) bool) (names []string, states []breaker.State) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, st := range m.seeds {
		if keep(st) {
			names, states = append(names, name), append(states, st)
		}
	}
	return names, states
}
