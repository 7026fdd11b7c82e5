package breaker

import (
	"slices"
	"sync"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Table is an in-memory set of breakers running the machine: what a Redis
// holds for breakerd, kept in a map. Stored states lapse as the scripts'
// keys do (State.TTL), judged on the time each call passes in. It is safe
// for concurrent use.
type Table struct {
	mu sync.Mutex
	m  map[string]entry
	// wins are the failure-rate windows (window mode), kept apart from
	// the states as the scripts keep them in their own key, each for one
	// window after its last write.
	wins map[string]winEntry
}

type winEntry struct {
	w       Window
	expires int64 // ms since the epoch
}

type entry struct {
	s       State
	expires int64 // ms since the epoch; 0: never
}

// NewTable returns an empty Table.
func NewTable() *Table { return &Table{m: map[string]entry{}, wins: map[string]winEntry{}} }

// load returns the live state of name at now (t.mu held).
func (t *Table) load(name string, now int64) State {
	s := t.loadState(name, now)
	if w, ok := t.wins[name]; ok {
		if now >= w.expires {
			delete(t.wins, name)
		} else {
			s.Win = w.w
		}
	}
	return s
}

func (t *Table) loadState(name string, now int64) State {
	e, ok := t.m[name]
	if !ok {
		return State{}
	}
	if e.expires != 0 && now >= e.expires {
		delete(t.m, name)
		return State{}
	}
	return e.s
}

// Apply runs c on the named breaker at now (ms) with p, stores the new
// state, and returns the answer, the view after the call and the events.
func (t *Table) Apply(name string, p Params, c Call, now int64) (Result, View, []Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, res, events := Apply(p, t.load(name, now), c, now)
	if res.Wrote {
		t.put(name, s, now, p.Retention)
	}
	if res.Windowed {
		t.wins[name] = winEntry{w: s.Win, expires: now + p.WindowMs}
	}
	return res, ViewOf(s, now), events
}

// Read returns the named breaker's view at now without changing it.
func (t *Table) Read(name string, now int64) View {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Read(t.load(name, now), now)
}

// Seed stores s for name as if a write at now had left it (a daemon
// starting its in-memory breakers from the last state Redis held).
func (t *Table) Seed(name string, s State, now, retention int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.put(name, s.clone(), now, retention)
}

// put stores s for name with the lifetime a write at now gives it (t.mu
// held).
func (t *Table) put(name string, s State, now, retention int64) {
	switch ttl := s.TTL(now, retention); ttl {
	case Gone:
		delete(t.m, name)
	case Persist:
		t.m[name] = entry{s: s}
	default:
		t.m[name] = entry{s: s, expires: now + ttl}
	}
}

// Reset forgets every breaker.
func (t *Table) Reset() {
	t.mu.Lock()
	t.m = map[string]entry{}
	t.wins = map[string]winEntry{}
	t.mu.Unlock()
}

// Names returns the breakers that hold state at now, sorted.
func (t *Table) Names(now int64) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	names := make([]string, 0, len(t.m))
	for name := range t.m {
		if s := t.load(name, now); len(s.Fields()) > 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Len returns how many breakers hold state.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// State returns a copy of the named breaker's stored state at now (the
// zero State when it holds none), and when that state lapses (ms since
// the epoch; 0: never).
func (t *Table) State(name string, now int64) (State, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.load(name, now)
	return s.clone(), t.m[name].expires
}

// Allow runs an Allow for worker on the named breaker and answers it as
// the API does: the decision, the ticket (with token when it is the
// probe), the denial (WithDenial) and the state, every reason but the
// denial's own words ending with suffix (which says where the answer
// comes from). The in-memory
// fallbacks (the daemon's while Redis is away, pkg/client's while breakerd
// is) both answer through it.
func (t *Table) Allow(name, worker, token string, p Params, alternatives []string, now int64, suffix string) *pb.AllowResponse {
	res, v, _ := t.Apply(name, p, Call{Op: OpAllow, Actor: worker, Token: token}, now)
	out := &pb.AllowResponse{Decision: res.Decision, Ticket: &pb.Ticket{Generation: v.Gen},
		RetryAfterMs: res.RetryAfter, State: v.Proto(name, alternatives), ShadowDecision: res.ShadowDecision}
	ShadowProto(out.State, v.Shadow, p.Shadow)
	if res.Decision == pb.Decision_DECISION_PROBE || res.ShadowDecision == pb.Decision_DECISION_PROBE {
		out.Ticket.LeaseToken = token
	}
	out.Ticket.ShadowDenied = ShadowDenied(res.ShadowDecision)
	WithDenial(out, name, worker, v, Parent{})
	if out.Reason != "" {
		out.Reason += suffix
	}
	if out.State.Reason != "" {
		out.State.Reason += suffix
	}
	return out
}
