package store

import (
	"context"
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

// OutageMode says what Allow and Record answer while Redis is unreachable.
type OutageMode int

const (
	// OutageMemory (the default) answers from this daemon's in-memory
	// breakers, running the same state machine as the scripts
	// (internal/breaker) and fed by every worker connected to this daemon,
	// so the quorum still means two workers. Each answer says degraded.
	// They start from the last state this daemon heard for each breaker
	// (ObserveEvent), so a breaker forced open stays denied. When Redis
	// answers again its state wins: what was counted in memory is dropped.
	OutageMemory OutageMode = iota
	// OutageUnavailable fails each call with an error (gRPC Unavailable):
	// every worker's client then applies its own fallback (fail open to a
	// local breaker, or fail closed).
	OutageUnavailable
)

// outageTimeouts is how many consecutive command timeouts mean Redis is
// away: a single slow command on a loaded machine is not an outage.
const outageTimeouts = 3

// recoveryPoll is how often a daemon in an outage asks Redis whether it
// is back (PING), so it returns within a second of Redis answering.
const recoveryPoll = 200 * time.Millisecond

// maxSeeds bounds the breakers whose last heard state is kept for an
// outage.
const maxSeeds = 100_000

// outage is a daemon's memory of the fleet for when Redis is away.
type outage struct {
	down     atomic.Bool
	timeouts atomic.Int32
	table    *breaker.Table
	closed   chan struct{}
	once     sync.Once

	mu    sync.Mutex
	seeds map[string]breaker.State
}

func newOutage() *outage {
	return &outage{table: breaker.NewTable(), closed: make(chan struct{}), seeds: map[string]breaker.State{}}
}

// Degraded reports whether the store is answering from memory because
// Redis is unreachable.
func (s *Store) Degraded() bool { return s.out.down.Load() }

// Close stops the store's background work (the recovery poll during an
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

// seedOf turns an event into the state it left its breaker in, as far as
// an event says; a closed breaker needs no seed. An event marked shadow
// seeds a shadowed breaker (setting "on"): the state it says would be is
// computed in memory too, never enforced.
func seedOf(e *pb.Event) (breaker.State, bool) {
	st := breaker.State{Gen: e.GetGeneration(), Cause: breaker.CauseOutage, Last: e.GetReason()}
	if e.GetShadow() {
		st.Shadow = "on"
	}
	switch e.GetTo() {
	case pb.State_STATE_FORCED_OPEN:
		return breaker.State{Gen: e.GetGeneration(), Force: "open", ForceReason: e.GetReason(), ForceBy: e.GetActor()}, true
	case pb.State_STATE_FORCED_CLOSED:
		return breaker.State{Gen: e.GetGeneration(), Force: "closed", ForceReason: e.GetReason(), ForceBy: e.GetActor()}, true
	case pb.State_STATE_OPEN:
		st.Phase, st.Opened, st.Cooldown = breaker.Open, e.GetAtMs(), e.GetCooldownMs()
		st.ProbeAt = e.GetAtMs() + e.GetCooldownMs()
		return st, true
	case pb.State_STATE_HALF_OPEN: // a probe was due: the next call probes
		st.Phase, st.Opened, st.ProbeAt = breaker.Open, e.GetAtMs(), e.GetAtMs()
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

// failed notes a Redis error from a call and reports whether the call is
// to be answered from memory: a connection that cannot be made or was
// lost means an outage at once, a timeout (or a "not now" reply such as
// LOADING) counts toward one. The caller's own deadline ending is not
// Redis's fault and counts nothing.
func (s *Store) failed(ctx context.Context, err error) bool {
	if s.o.Outage != OutageMemory || ctx.Err() != nil || !IsUnavailable(err) {
		return false
	}
	if !connectionLost(err) && s.out.timeouts.Add(1) < outageTimeouts {
		return false
	}
	s.enterOutage()
	return true
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

// answered notes that Redis answered a call.
func (s *Store) answered() { s.out.timeouts.Store(0) }

func (s *Store) enterOutage() {
	o := s.out
	if !o.down.CompareAndSwap(false, true) {
		return
	}
	now := s.outageNow()
	o.mu.Lock()
	for name, st := range o.seeds {
		o.table.Seed(name, st, now, s.Policy(name).Retention().Milliseconds())
	}
	o.mu.Unlock()
	if s.o.OnOutage != nil {
		s.o.OnOutage(true)
	}
	go s.awaitRecovery()
}

// awaitRecovery polls Redis until it answers, then hands every decision
// back to it and forgets what was counted in memory.
func (s *Store) awaitRecovery() {
	t := time.NewTicker(recoveryPoll)
	defer t.Stop()
	for {
		select {
		case <-s.out.closed:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), recoveryPoll)
		err := s.rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			s.out.table.Reset()
			s.out.timeouts.Store(0)
			s.out.down.Store(false)
			if s.o.OnOutage != nil {
				s.o.OnOutage(false)
			}
			return
		}
	}
}

// outageSuffix ends every reason given from memory.
const outageSuffix = " (breakerd cannot reach its Redis: judged by this daemon alone)"

func (s *Store) memoryAllow(name, worker string) *pb.AllowResponse {
	p := s.Policy(name)
	out := s.out.table.Allow(name, worker, s.o.NewToken(), ParamsOf(p, s.o.Rand()), p.Alternatives, s.outageNow(), outageSuffix)
	out.Degraded = true
	return out
}

func (s *Store) memoryRecord(req *pb.RecordRequest, c breaker.Call) *pb.RecordResponse {
	name := req.GetBreaker()
	p := s.Policy(name)
	now := s.outageNow()
	res, v, _ := s.out.table.Apply(name, ParamsOf(p, s.o.Rand()), c, now)
	st := stateOf(v, name, p)
	if w := windowMs(p); w > 0 { // the window after the call, as Redis answers
		cur, _ := s.out.table.State(name, now)
		t := breaker.WindowOf(cur, w, now)
		st.WindowCalls, st.WindowFailures, st.SlowCalls = t.Calls, t.Fails, t.Slow
	}
	return &pb.RecordResponse{Counted: res.Counted, Note: res.Note.String(), State: st, Degraded: true}
}
