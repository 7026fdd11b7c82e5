// Package store keeps breaker state in Redis through Lua scripts: one
// script per decision, atomic, so that any number of daemons and workers
// share one state machine without racing.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/ceiling"
	"github.com/breakerd/breakerd/internal/forgotten"
	"github.com/breakerd/breakerd/internal/outage"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/probe"
	"github.com/breakerd/breakerd/internal/quorum"
	"github.com/breakerd/breakerd/internal/replylost"
	"github.com/breakerd/breakerd/internal/savings"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// DefaultChannel is the pub/sub channel live events are published on.
const DefaultChannel = "breakerd:events"

// Options configure a Store. The zero value of each field means its default.
type Options struct {
	// Policies resolves each breaker's tunables. Default: policy.Default()
	// for every breaker. SetPolicies replaces it while the Store runs.
	Policies *policy.Set
	// EventsMaxLen bounds each breaker's event stream (approximately, as
	// XADD MAXLEN ~ does). Default 1000.
	EventsMaxLen int64
	// EventRetention is how long a breaker's event stream outlives its last
	// event. Default 7 days.
	EventRetention time.Duration
	// Channel is the pub/sub channel for live events. Default DefaultChannel.
	Channel string
	// Now, when set, pins the time every script decides by. Tests use it to
	// move time on a real Redis without sleeping; production leaves it nil,
	// so that Redis TIME is the fleet's one clock and no daemon's clock
	// decides anything.
	Now func() time.Time
	// Rand draws the jitter fraction, uniform in [0, 1). Default
	// math/rand/v2.Float64. Must be safe for concurrent use.
	Rand func() float64
	// NewToken makes probe lease tokens. Default probe.NewToken.
	NewToken func() string
	// Outage says what Allow and Record answer while Redis is unreachable.
	// Default OutageMemory.
	Outage OutageMode
	// OnOutage, when set, is called with true when the store starts
	// answering from memory for the breakers on the Redis node at addr
	// ("" for a single Redis; a master's address on a Cluster) and with
	// false when that node answers again or no longer serves them (logs,
	// metrics; Degraded says whether any node is out). cause is the error
	// that began the outage (a refused connection, a decision unanswered
	// at the decision timeout, a failed health check); nil when it ends.
	// It must not block.
	OnOutage func(addr string, down bool, cause error)
	// Heard, when set, returns a channel closed once every event
	// published reaches ObserveEvent (events.Hub.Live). The outage memory
	// then answers only once seeded: once a listing of every breaker from
	// Redis (ListSeeding) begun after that channel closed has completed
	// with no outage meanwhile. Until then a node in an outage fails its
	// calls and reads with ErrUnseeded (Unavailable): memory that has not
	// heard a pin made before this daemon started would allow its
	// breaker. Nil: the memory answers at once from what it was told
	// (ObserveEvent, ObserveStates), for a store a tool or a test builds.
	Heard func() <-chan struct{}
	// DecisionTimeout bounds each decision script (Allow, Record) on this
	// daemon's own budget, whatever the caller's: one still outstanding
	// after it counts as Redis failing (stall.go), and its caller gets an
	// error or, once the node is in an outage, an answer from memory.
	// The daemon sets it (--redis-decision-timeout, DefaultDecisionTimeout).
	// 0: LaxDecisionTimeout, a bound only a stall reaches, for a store a
	// tool or a test builds on a host whose load is not Redis's fault.
	DecisionTimeout time.Duration
	// Unpipelined, when true, sends each Allow and Record script on its
	// own round trip. Default (false): concurrent Allow and Record calls
	// share round trips, coalesced into Redis pipelines by go-redis's
	// automatic pipelining (see coalesce.go); a lone call still goes out at
	// once, in one round trip.
	Unpipelined bool
	// MaxBreakers is the ceiling on live breakers (breakers
	// holding state): a Record that would create state for a new breaker
	// past it fails with a *CeilingError. 0: no ceiling. Force is never
	// refused. See ceiling.Ceiling for how it counts.
	MaxBreakers int64
	// LiveKey is the sorted set the ceiling counts in. Default LiveKey.
	// Tests sharing a Redis give each daemon group its own.
	LiveKey string
	// SavingsKey is the index of the breakers that saved anything
	// (savings.Options.IndexKey). Default SavingsKey. Tests sharing a
	// Redis give each daemon group its own.
	SavingsKey string
	// OnSaved is the savings index's savings.Options.OnSaved: the
	// daemon's metrics.
	OnSaved func(breaker string, c savings.Counts)
	// OnLost, when set, is called once for each state this daemon heard
	// that it finds Redis has lost (internal/forgotten): from an Allow, or from
	// FindLost. It must not block.
	OnLost func(forgotten.Lost)
	// Log receives what no answer tells: a script's reply lost after
	// Redis ran it (internal/replylost). Default: discarded.
	Log *slog.Logger
	// Tracer, when set, wraps each Allow and Record script in a span, a
	// child of the call's (tracing.go). Default: none.
	Tracer trace.Tracer
}

// Store runs breakerd's scripts against one Redis (or Redis Cluster).
// It holds no breaker state itself and is safe for concurrent use.
type Store struct {
	rdb redis.UniversalClient
	o   Options
	out *outage.Memory
	// ceil is the live-breaker ceiling (internal/ceiling); nil without one.
	ceil *ceiling.Ceiling
	// policies is o.Policies, swapped whole by SetPolicies (a config
	// reload) and read once per call, so a call never mixes two sets.
	policies atomic.Pointer[policy.Set]
	// pipe coalesces concurrent Allow and Record scripts into pipelines
	// (nil with Options.Unpipelined).
	pipe atomic.Pointer[coalescer]
	// saved is the savings index (Savings).
	saved *savings.Index
	// fg remembers the lost states reported (internal/forgotten).
	fg *forgotten.Reports
	// settler settles the replies lost (internal/replylost).
	settler *replylost.Settler
	// alerts is the alert quota (SetAlertQuota); it holds an AlertQuota.
	alerts atomic.Value
	// fixedArgs are the arguments of common that never change, converted
	// to interfaces once rather than on every call: events max length,
	// event retention (ms), channel.
	fixedArgs [3]any
	// dec runs the decision scripts (decide, stall.go).
	dec decisions
	// pieceSeeded, when set (tests only), is called once each piece of a
	// paced listing has seeded the outage memory.
	pieceSeeded func([]*pb.BreakerState)
}

// AlertQuota bounds how many of the alerts one caller's Records raise go
// to hooks one by one (the server's per-token quotas implement it). Quiet
// is asked before a Record: "" sends the alerts it raises, any other mark
// is stored with them (breaker.Call.Quiet) and hooks do not send them
// alone. Raised is told after the script how many alerts it raised under
// that mark. Implementations must be safe for concurrent use.
type AlertQuota interface {
	Quiet(ctx context.Context) string
	Raised(ctx context.Context, mark string, alerts int64)
}

// SetAlertQuota sets the alert quota every Record consults. Call it before
// serving.
func (s *Store) SetAlertQuota(q AlertQuota) { s.alerts.Store(&q) }

func (s *Store) alertQuota() AlertQuota {
	if q, _ := s.alerts.Load().(*AlertQuota); q != nil {
		return *q
	}
	return nil
}

// New returns a Store on rdb. Call Load before serving.
func New(rdb redis.UniversalClient, o Options) *Store {
	if o.Policies == nil {
		o.Policies = policy.NewSet(policy.Default())
	}
	if o.EventsMaxLen == 0 {
		o.EventsMaxLen = 1000
	}
	if o.EventRetention == 0 {
		o.EventRetention = 7 * 24 * time.Hour
	}
	if o.Channel == "" {
		o.Channel = DefaultChannel
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.NewToken == nil {
		o.NewToken = probe.NewToken
	}
	if o.DecisionTimeout <= 0 {
		o.DecisionTimeout = LaxDecisionTimeout
	}
	s := &Store{rdb: rdb, o: o, out: outage.New(), fg: forgotten.NewReports(o.OnLost), settler: &replylost.Settler{Log: o.Log},
		fixedArgs: [3]any{o.EventsMaxLen, o.EventRetention.Milliseconds(), o.Channel}}
	if o.MaxBreakers > 0 {
		s.ceil = newCeiling(s)
	}
	s.saved = newSavings(s)
	s.policies.Store(o.Policies)
	if !o.Unpipelined {
		s.pipe.Store(newCoalescer(rdb))
	}
	return s
}

// SetPolicies replaces the policy set for every call that starts after it
// (a config reload). Calls in flight finish with the set they started
// with. A nil set is ignored.
func (s *Store) SetPolicies(p *policy.Set) {
	if p != nil {
		s.policies.Store(p)
	}
}

// Policies returns the policy set in force.
func (s *Store) Policies() *policy.Set { return s.policies.Load() }

// Channel returns the pub/sub channel live events are published on.
func (s *Store) Channel() string { return s.o.Channel }

// Now reads the daemon's own clock (Options.Now, else the system's): for
// what a daemon decides without Redis, never for breaker state.
func (s *Store) Now() time.Time { return time.UnixMilli(s.nowMs()) }

// Policy returns the policy that applies to breaker.
func (s *Store) Policy(breaker string) policy.Policy { return s.policies.Load().For(breaker) }

// Load pings Redis and loads every script (SCRIPT LOAD), so that the first
// decisions run by EVALSHA. It is the daemon's readiness check.
func (s *Store) Load(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	for _, sc := range allScripts {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("store: load script: %w", err)
		}
	}
	return nil
}

// Check is the daemon's periodic health check, one round trip when all is
// well: SCRIPT EXISTS for every script (on a Cluster, every node is asked),
// then SCRIPT LOAD for only the scripts missing (after a restart, a SCRIPT
// FLUSH, or a failover to a replica, whose script cache starts empty). It
// returns the number of scripts it loaded; an error means Redis did not
// answer. A single Redis (or Sentinel's master) that cannot serve the
// check is in an outage as a decision would find it (checkFailed), so
// the health check and the store agree.
func (s *Store) Check(ctx context.Context) (loaded int, err error) {
	hashes := make([]string, len(allScripts))
	for i, sc := range allScripts {
		hashes[i] = sc.Hash()
	}
	exists, err := s.rdb.ScriptExists(ctx, hashes...).Result()
	if err != nil {
		s.checkFailed(err)
		return 0, fmt.Errorf("store: script exists: %w", err)
	}
	if len(exists) != len(hashes) {
		return 0, fmt.Errorf("%w: SCRIPT EXISTS answered %d flags for %d scripts", errBadReply, len(exists), len(hashes))
	}
	for i, ok := range exists {
		if ok {
			continue
		}
		if err := allScripts[i].Load(ctx, s.rdb).Err(); err != nil {
			return loaded, fmt.Errorf("store: load script: %w", err)
		}
		loaded++
	}
	return loaded, nil
}

// Allow runs allow.lua: one round trip. A denial is data in the response,
// never an error; errors are Redis failures or malformed replies. While
// Redis is unreachable it answers from memory (Options.Outage). It
// consults no parent scope: see AllowUnder.
func (s *Store) Allow(ctx context.Context, name, worker string) (*pb.AllowResponse, error) {
	res, _, err := s.AllowUnder(ctx, name, worker, breaker.Parent{})
	return res, err
}

// AllowUnder is Allow with the verdict of the breaker's parent scope as
// an input (breaker.Parent; internal/scope keeps it): one round trip. A
// denying parent answers DECISION_DENIED_PARENT_OPEN with scope, reason
// and retry_after from the parent; due reports that the parent's denial
// has ended by the fleet's clock, so its own script must be asked and
// then this one again. An answer that lets the call out carries the
// parent's generation and (with a PROBE verdict) lease in its ticket.
// While Redis is unreachable it answers from memory, without the parent.
func (s *Store) AllowUnder(ctx context.Context, name, worker string, parent breaker.Parent) (res *pb.AllowResponse, due bool, err error) {
	n := s.nodeOf(ctx, name)
	if n.Down() {
		res, err := s.memoryAllow(n, name, worker)
		return res, false, err
	}
	set := s.policies.Load()
	p, g := set.For(name), groupOf(set, name)
	params := ParamsOf(p, s.o.Rand())
	var parentCode, parentUntil int64
	if parent.Denies() {
		parentCode, parentUntil = int64(parent.Decision), parent.Until
	}
	// The jitter goes as a float64: go-redis writes it in decimal ('f',
	// shortest), which Lua's tonumber reads back exactly.
	argv := &allowArgv{commonArgv: s.commonArgv(name, worker, p), Token: s.o.NewToken(), ProbeTimeout: params.ProbeTimeout,
		CooldownBase: params.CooldownBase, Jitter: params.Jitter, PolicyShadow: boolArg(params.Shadow),
		Parent: parentCode, ParentUntil: parentUntil}
	args := argv.args()
	known, heard := s.heard(name) // before Redis is asked (see heard)
	keys := s.scriptKeys(name, g)
	out, err := s.decide(ctx, n, name, allowScript, keys, args)
	if err != nil {
		s.lostAllow(name, worker, keys, args, err)
		if s.inMemory(ctx, n, err) {
			res, err := s.memoryAllow(n, name, worker)
			return res, false, err
		}
		return nil, false, fmt.Errorf("store: allow %q: %w", name, err)
	}
	r := reply{v: out}
	code := r.int(0)
	retry := r.int(1)
	token := r.str(2)
	v := r.view(3)
	shadow := r.int(4)
	due = r.int(5) == 1
	repeated := r.int(6) == 1
	if err := r.errOr(); err != nil {
		return nil, false, fmt.Errorf("store: allow %q: %w", name, err)
	}
	if repeated {
		s.log().Warn("redis had applied an Allow whose reply was lost; the resent Allow was answered as the probe it already was",
			"breaker", name, "worker", worker)
	}
	if code < 1 || code > int64(pb.Decision_DECISION_DENIED_PARENT_OPEN) || shadow < 0 || shadow > int64(pb.Decision_DECISION_DENIED_PARENT_OPEN) {
		return nil, false, fmt.Errorf("store: allow %q: unknown decision %d (shadow %d)", name, code, shadow)
	}
	st := stateOf(v, name, p)
	withGroup(st, g)
	s.ceil.Register(ctx, name, p, st, false)
	if code == int64(pb.Decision_DECISION_ALLOWED) || code == int64(pb.Decision_DECISION_PROBE) {
		if out, ok := s.guard(ctx, name, worker, known, heard, v.Gen, p); ok {
			return out, false, nil
		}
	}
	return AllowAnswer(name, worker, breaker.Result{Decision: pb.Decision(code), RetryAfter: retry,
		ShadowDecision: pb.Decision(shadow)}, v, token, st, parent), due, nil
}

// AllowAnswer is the API's answer to an Allow whose result is res, the
// breaker's view after it v, its state as the API shows it st, under the
// parent verdict parent (breaker.Parent; the zero value for none): the
// ticket carries the lease token when the call is the probe (or, in
// shadow mode, the shadow probe) and is marked shadow_denied when enforced
// mode would have denied the call; the denial and its words are
// breaker.WithDenial's. A parent's denial (DENIED_PARENT_OPEN) names the
// parent in scope and gives the parent's words; a call let out carries
// the parent's generation, and its probe lease when the verdict is PROBE.
func AllowAnswer(name, worker string, res breaker.Result, v breaker.View, token string, st *pb.BreakerState, parent breaker.Parent) *pb.AllowResponse {
	out := &pb.AllowResponse{
		Decision:       res.Decision,
		Ticket:         &pb.Ticket{Generation: v.Gen},
		RetryAfterMs:   res.RetryAfter,
		State:          st,
		ShadowDecision: res.ShadowDecision,
	}
	if res.Decision == pb.Decision_DECISION_PROBE || res.ShadowDecision == pb.Decision_DECISION_PROBE {
		out.Ticket.LeaseToken = token
	}
	out.Ticket.ShadowDenied = breaker.ShadowDenied(res.ShadowDecision)
	breaker.WithDenial(out, name, worker, v, parent)
	switch res.Decision {
	case pb.Decision_DECISION_DENIED_PARENT_OPEN:
		out.Scope = parent.Name
	case pb.Decision_DECISION_ALLOWED, pb.Decision_DECISION_PROBE:
		if parent.Name != "" {
			out.Ticket.ParentGeneration = parent.Gen
			if parent.Decision == pb.Decision_DECISION_PROBE {
				out.Ticket.ParentLeaseToken = parent.Lease
			}
		}
	}
	return out
}

// Record runs record.lua for req: NewRecordInput under the policy set in
// force and the daemon's clock, then Apply. Errors are NewRecordInput's
// (a bad field) and Apply's.
func (s *Store) Record(ctx context.Context, req *pb.RecordRequest) (*pb.RecordResponse, error) {
	in, err := NewRecordInput(req, s.policies.Load(), s.Now())
	if err != nil {
		return nil, err
	}
	return s.Apply(ctx, in)
}

// Apply runs record.lua for in: one round trip, under in's policy and
// group (never resolved again). Each call carries an id (RecordInput's
// scriptID), so that Redis applies it once even when it is sent twice:
// by the daemon after a lost reply (internal/replylost), or by the worker
// after an answer that never reached it.
func (s *Store) Apply(ctx context.Context, in RecordInput) (*pb.RecordResponse, error) {
	n := s.nodeOf(ctx, in.Breaker)
	if n.Down() {
		return s.memoryRecord(n, in)
	}
	return s.record(ctx, in, n)
}

// record runs record.lua for in. With the breaker's node n, a node that
// cannot serve the call is answered from memory (Options.Outage), as
// Apply answers; with nil, it is an error.
func (s *Store) record(ctx context.Context, in RecordInput, n *outage.Node) (*pb.RecordResponse, error) {
	name, c, p, g := in.Breaker, in.Call, in.Policy, in.Group
	// Only a failure, a slow success, or any call in window mode (it
	// writes the window) can create state for a breaker that holds none,
	// or trip one.
	mayTrip := in.Outcome != pb.Outcome_OUTCOME_SUCCESS || p.SlowCall > 0 && c.Latency > p.SlowCall.Milliseconds() || p.Mode == policy.ModeWindow
	if mayTrip {
		// The ceiling applies to it.
		if err := s.ceil.Admit(ctx, name); err != nil {
			return nil, err
		}
	}
	params := ParamsOf(p, s.o.Rand())
	open, readCounts := s.groupCap(ctx, g, name, mayTrip, &params)
	quiet, q := "", s.alertQuota()
	if q != nil {
		quiet = q.Quiet(ctx)
	}
	argv := s.recordArgv(name, in.Worker, c, p, params)
	argv.GroupOpen, argv.Quiet, argv.RecordID, argv.RecordTTL = open, quiet, in.scriptID(), replylost.RecordMemory.Milliseconds()
	argv.MayCreate, argv.RecordKeep, argv.Trace = boolArg(mayTrip), replylost.RecordsKept, c.Trace
	args := argv.args()
	var res []any
	var err error
	if n != nil {
		res, err = s.decide(ctx, n, name, recordScript, s.recordKeys(name, g), args)
	} else {
		res, err = s.script(ctx, recordScript, s.recordKeys(name, g), args)
	}
	if err != nil {
		if n != nil && s.inMemory(ctx, n, err) {
			return s.memoryRecord(n, in)
		}
		s.lostRecord(name, in.Worker, err)
		return nil, fmt.Errorf("store: record %q: %w", name, err)
	}
	a, err := s.recordAnswer(ctx, res, name, in.Worker, c, p, g, readCounts)
	if err == nil && q != nil { // the reply's last element: the alerts it raised
		q.Raised(ctx, quiet, (&reply{v: res}).int(len(res)-1))
	}
	return a, err
}

// recordAnswer decodes record.lua's reply res into the API's answer.
func (s *Store) recordAnswer(ctx context.Context, res []any, name, worker string, c breaker.Call, p policy.Policy, g *policy.Group, readCounts bool) (*pb.RecordResponse, error) {
	r := reply{v: res}
	counted := r.int(0) == 1
	note := breaker.Note(r.str(1))
	v := r.view(2)
	repeated := r.int(3) == 1
	if err := r.errOr(); err != nil {
		return nil, fmt.Errorf("store: record %q: %w", name, err)
	}
	if repeated {
		s.log().Warn("redis had applied a Record whose reply was lost; the resent Record was answered as the first, not counted again",
			"breaker", name, "worker", worker)
	}
	if g != nil && s.onCluster() && (readCounts || v.Gen != c.Ticket.Gen) {
		s.indexGroup(ctx, g, name, p, v)
	}
	st := stateOf(v, name, p)
	withGroup(st, g)
	if len(res) == 8 { // window mode: the window's calls, failures and slow calls
		st.WindowCalls, st.WindowFailures, st.SlowCalls = r.int(4), r.int(5), r.int(6)
	}
	// A 401 or 402 raises an alert even on a breaker holding nothing.
	alerted := c.Evidence == quorum.CredentialRejected || c.Evidence == quorum.QuotaExhausted
	s.ceil.Register(ctx, name, p, st, alerted)
	return &pb.RecordResponse{Counted: counted, Note: note.String(), State: st}, nil
}

// groupCap sets params' group cap (group.go) for a Record on name in
// group g (nil: none) and returns record.lua's open argument: empty lets the
// script count the group itself (a single Redis); on a Cluster the daemon
// reads the count first, for a call that may trip (readCounts then).
func (s *Store) groupCap(ctx context.Context, g *policy.Group, name string, mayTrip bool, params *breaker.Params) (open any, readCounts bool) {
	open = ""
	if g == nil {
		return open, false
	}
	params.MaxOpenPPM, params.GroupMembers = g.MaxOpenPPM(), int64(len(g.Members))
	if !s.onCluster() {
		return open, false
	}
	if mayTrip {
		if gc, ok := s.groupCounts(ctx, g, name); ok {
			return gc.Open, true
		}
	}
	return int64(0), false
}

// ParamsOf returns policy p as the scripts receive it, with the jitter
// fraction drawn by u (uniform in [0, 1)).
func ParamsOf(p policy.Policy, u float64) breaker.Params {
	return breaker.Params{
		Rule: quorum.Rule{Threshold: int64(p.Threshold), MinWorkers: int64(p.MinWorkers),
			RateLimitTrips: int64(p.RateLimitTrips)},
		CooldownBase: p.CooldownBase.Milliseconds(),
		CooldownCap:  p.CooldownCap.Milliseconds(),
		ProbeTimeout: p.ProbeTimeout.Milliseconds(),
		Retention:    p.Retention().Milliseconds(),
		Jitter:       p.Jitter * u,
		PauseTTL:     p.PauseTTL.Milliseconds(),
		WindowMs:     windowMs(p),
		FailureRate:  p.FailureRate,
		MinCalls:     int64(p.MinCalls),

		SlowCallMs:        p.SlowCall.Milliseconds(),
		SlowCallThreshold: int64(p.SlowCallThreshold),
		SlowCallRate:      p.SlowCallRate,

		Shadow: p.Shadow,
	}
}

// windowMs is p's failure-rate window in ms, or 0 in consecutive mode.
// stateOf is v as the API shows it under policy p.
func stateOf(v breaker.View, name string, p policy.Policy) *pb.BreakerState {
	st := v.Proto(name, p.Alternatives)
	st.Parent = p.Parent
	st.WindowMode = windowMs(p) > 0
	st.SlowCallMs = p.SlowCall.Milliseconds()
	breaker.ShadowProto(st, v.Shadow, p.Shadow)
	return st
}

func windowMs(p policy.Policy) int64 {
	if p.Mode != policy.ModeWindow {
		return 0
	}
	return p.Window.Milliseconds()
}

// boolArg is a script's boolean ARGV: "1" or "0".
func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Force runs force.lua: pins the breaker (mode OPEN or CLOSED, with a
// reason and an optional ttl; 0 means until AUTO) or returns it to
// automatic operation (AUTO).
func (s *Store) Force(ctx context.Context, breaker string, mode pb.ForceMode, reason string, ttl time.Duration, operator string) (*pb.BreakerState, error) {
	m, ok := map[pb.ForceMode]string{
		pb.ForceMode_FORCE_MODE_OPEN:   "open",
		pb.ForceMode_FORCE_MODE_CLOSED: "closed",
		pb.ForceMode_FORCE_MODE_AUTO:   "auto",
	}[mode]
	if !ok {
		return nil, fmt.Errorf("store: force %q: unknown mode %v", breaker, mode)
	}
	return s.force(ctx, breaker, m, "", reason, ttl, operator)
}

// SetShadow runs force.lua in mode shadow: stores an operator's shadow
// setting for the breaker (ON, OFF, or POLICY to follow its policy again),
// leaving its state machine as it is (a probe lease is dropped) and
// bumping its generation; the event is a "forced" one with cause shadow.
// A pin is kept and still wins. reason is recorded in the event.
func (s *Store) SetShadow(ctx context.Context, breaker string, setting pb.ShadowSetting, reason, operator string) (*pb.BreakerState, error) {
	v, ok := map[pb.ShadowSetting]string{
		pb.ShadowSetting_SHADOW_SETTING_ON:     "on",
		pb.ShadowSetting_SHADOW_SETTING_OFF:    "off",
		pb.ShadowSetting_SHADOW_SETTING_POLICY: "",
	}[setting]
	if !ok {
		return nil, fmt.Errorf("store: shadow %q: unknown setting %v", breaker, setting)
	}
	return s.force(ctx, breaker, "shadow", v, reason, 0, operator)
}

func (s *Store) force(ctx context.Context, breaker, m, shadow, reason string, ttl time.Duration, operator string) (*pb.BreakerState, error) {
	set := s.policies.Load()
	p, g := set.For(breaker), groupOf(set, breaker)
	args := append(s.common(breaker, operator, p, 5), m, reason, ttl.Milliseconds(), boolArg(p.Shadow), shadow)
	res, err := run(ctx, s.rdb, forceScript, s.scriptKeys(breaker, g), args...)
	if err != nil {
		return nil, fmt.Errorf("store: force %q: %w", breaker, err)
	}
	r := reply{v: res}
	v := r.view(0)
	if err := r.errOr(); err != nil {
		return nil, fmt.Errorf("store: force %q: %w", breaker, err)
	}
	if g != nil && s.onCluster() {
		s.indexGroup(ctx, g, breaker, p, v)
	}
	st := stateOf(v, breaker, p)
	withGroup(st, g)
	s.ceil.Register(ctx, breaker, p, st, true) // counted, never refused
	return st, nil
}

// Get returns one breaker's state (read.lua; never writes).
func (s *Store) Get(ctx context.Context, breaker string) (*pb.BreakerState, error) {
	st, err := s.BatchGet(ctx, []string{breaker})
	if err != nil {
		return nil, err
	}
	return st[0], nil
}

// batchRead returns the states Redis holds for the named breakers, in
// order, in one pipelined round trip (BatchGet answers what Allow would
// judge by). It never writes. With leaveOut (a listing), a breaker whose
// key holds a value breakerd did not write (WRONGTYPE) fails alone: its
// state is nil, with a warning naming it, and the others are read in the
// same round trip.
func (s *Store) batchRead(ctx context.Context, breakers []string, leaveOut bool) ([]*pb.BreakerState, error) {
	if len(breakers) == 0 {
		return nil, nil
	}
	// One policy per name, resolved once: a reload mid-call cannot mix two.
	set := s.policies.Load()
	policies := make([]policy.Policy, len(breakers))
	groups := make([]*policy.Group, len(breakers))
	for i, b := range breakers {
		policies[i], groups[i] = set.For(b), groupOf(set, b)
	}
	// The breakers' reads and their groups' counts, in one round trip.
	cmds := make([]*redis.Cmd, len(breakers))
	var counts map[string]*redis.Cmd
	err := pipelined(ctx, s.rdb, func(_ redis.Pipeliner, eval evalFunc) {
		counts = map[string]*redis.Cmd{}
		for i, b := range breakers {
			cmds[i] = eval(readScript, keys(b), append(s.common(b, "", policies[i], 1), windowMs(policies[i]))...)
			if g := groups[i]; g != nil && counts[g.Name] == nil {
				counts[g.Name] = s.groupStatus(eval, g.Name)
			}
		}
	})
	if err != nil && !(leaveOut && wrongType(err)) { // each read's own error is judged below
		return nil, fmt.Errorf("store: read: %w", err)
	}
	out := make([]*pb.BreakerState, len(breakers))
	for i, c := range cmds {
		res, err := c.Slice()
		if leaveOut && wrongType(err) {
			s.log().Warn("a breaker's key holds a value breakerd did not write: the breaker is left out of listings until the key is deleted",
				"breaker", breakers[i], "error", scriptError(readScript, err))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("store: read %q: %w", breakers[i], scriptError(readScript, err))
		}
		r := reply{v: res}
		out[i] = stateOf(r.view(0), breakers[i], policies[i])
		if len(res) == 4 { // window mode: the window's calls, failures and slow calls
			out[i].WindowCalls, out[i].WindowFailures, out[i].SlowCalls = r.int(1), r.int(2), r.int(3)
		}
		if err := r.errOr(); err != nil {
			return nil, fmt.Errorf("store: read %q: %w", breakers[i], err)
		}
		if g := groups[i]; g != nil {
			withGroup(out[i], g)
			if out[i].GroupKnown, out[i].GroupOpen, err = groupStatusOf(counts[g.Name]); err != nil {
				return nil, fmt.Errorf("store: group %q: %w", g.Name, err)
			}
		}
	}
	return out, nil
}

// List returns every breaker that holds state, keeping only those whose
// state is in states (all when states is empty). It SCANs the keyspace
// (every master, on a Cluster), so it is for operators, not hot paths.
func (s *Store) List(ctx context.Context, states ...pb.State) ([]*pb.BreakerState, error) {
	return s.list(ctx, s.listed, states)
}

// list is List, reading the breakers it found with read (listed, or
// batchGetPaced for a background listing).
func (s *Store) list(ctx context.Context, read func(context.Context, []string) ([]*pb.BreakerState, error), states []pb.State) ([]*pb.BreakerState, error) {
	if s.Degraded() { // a node's breakers are answered from memory (outage_read.go)
		return s.listPages(ctx, states)
	}
	names, err := s.scanNames(ctx, stateKeyPattern, "state")
	if err != nil {
		return nil, err
	}
	all, err := read(ctx, names)
	if err != nil {
		return nil, err
	}
	var out []*pb.BreakerState
	for _, st := range all {
		if len(states) == 0 || containsState(states, st.State) {
			out = append(out, st)
		}
	}
	return out, nil
}

func containsState(states []pb.State, s pb.State) bool {
	for _, x := range states {
		if x == s {
			return true
		}
	}
	return false
}

func (s *Store) scanNames(ctx context.Context, pattern, suffix string) ([]string, error) {
	// ForEachMaster scans the masters concurrently: mu guards the result.
	var mu sync.Mutex
	seen := map[string]bool{}
	var names []string
	scan := func(ctx context.Context, c redis.Cmdable) error {
		it := c.Scan(ctx, 0, pattern, 500).Iterator()
		for it.Next(ctx) {
			if n, ok := nameOf(it.Val(), suffix); ok {
				mu.Lock()
				if !seen[n] {
					seen[n] = true
					names = append(names, n)
				}
				mu.Unlock()
			}
		}
		return it.Err()
	}
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, s.rdb)
	}
	if err != nil {
		return nil, fmt.Errorf("store: scan: %w", err)
	}
	return names, nil
}

// unavailablePrefixes are Redis error replies that mean "not now" rather
// than "wrong": the server is loading, failing over, read-only, or busy.
var unavailablePrefixes = []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "NOREPLICAS"}

// IsUnavailable reports whether err means Redis could not serve the call
// now (unreachable, loading, failing over), as opposed to a bad reply or a
// script error.
func IsUnavailable(err error) bool {
	if err == nil || errors.Is(err, errBadReply) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		for _, p := range unavailablePrefixes {
			if redis.HasErrorPrefix(err, p) {
				return true
			}
		}
		return false
	}
	return true
}
