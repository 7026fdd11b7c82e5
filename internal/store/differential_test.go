package store_test

import (
	stdcmp "cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/testing/protocmp"
	"pgregory.net/rapid"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The differential test: random sequences of calls run on the Lua scripts
// (the executor on Redis) and on the Go state machine (internal/breaker,
// the spec), and every answer, stored state, worker set and event must be
// identical. Change a rule in one and not the other, and this fails.
//
//	go test ./internal/store -run Differential -v
//
// prints how many sequences were checked on each backend. A failure
// prints the shrunk sequence, one step a line; save it under
// testdata/differential/ (the JSON rapid logs) and TestDifferentialCases
// replays it on every run.

// dstep is one step of a sequence.
type dstep struct {
	Op         string  `json:"op"` // allow, record, force, read, recover, advance
	Breaker    int     `json:"breaker,omitempty"`
	Worker     string  `json:"worker,omitempty"`
	Outcome    string  `json:"outcome,omitempty"` // pb.Outcome name without OUTCOME_
	Ticket     string  `json:"ticket,omitempty"`  // current, stale, forged, none (recover: current, stale)
	RetryAfter int64   `json:"retry_after_ms,omitempty"`
	Deadline   int64   `json:"deadline_ms,omitempty"`
	Credential bool    `json:"credential_worked,omitempty"`
	U          float64 `json:"u,omitempty"` // the jitter draw
	Mode       string  `json:"mode,omitempty"`
	// Shadow is a force's shadow setting with Mode "shadow": on, off, or
	// policy.
	Shadow string `json:"shadow,omitempty"`
	TTL    int64  `json:"ttl_ms,omitempty"`
	Ms     int64  `json:"ms,omitempty"` // advance
	// Latency is the call's latency (record), ms; 0 reads as 1500.
	Latency int64 `json:"latency_ms,omitempty"`
	// Known and Open are the group's other breakers known and open
	// (record, with a group: seeded into the group's index before it).
	Known int64 `json:"known,omitempty"`
	Open  int64 `json:"open,omitempty"`
	// Parent is an allow's parent verdict (breaker.Parent): "" none, or
	// allowed, probe, open, in_flight, forced, paused; ParentIn is when
	// its denial ends, ms from now (ParentForever: never by itself).
	Parent        string `json:"parent,omitempty"`
	ParentIn      int64  `json:"parent_in_ms,omitempty"`
	ParentForever bool   `json:"parent_forever,omitempty"`
	// Again sends an allow with the lease token of the allow before it,
	// as go-redis resends a command whose reply was lost.
	Again bool `json:"again,omitempty"`
	// Quiet is a record's alert mark (breaker.Call.Quiet): its caller is
	// past its alert quota.
	Quiet string `json:"quiet,omitempty"`
}

// parentVerdicts maps dstep.Parent to the verdict's decision.
var parentVerdicts = map[string]pb.Decision{"allowed": pb.Decision_DECISION_ALLOWED, "probe": pb.Decision_DECISION_PROBE,
	"open": pb.Decision_DECISION_DENIED_OPEN, "in_flight": pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT,
	"forced": pb.Decision_DECISION_DENIED_FORCED_OPEN, "paused": pb.Decision_DECISION_DENIED_PAUSED}

// parent is the step's parent verdict at now.
func (s dstep) parent(now int64) breaker.Parent {
	if s.Parent == "" {
		return breaker.Parent{}
	}
	v := breaker.Parent{Decision: parentVerdicts[s.Parent], Until: now + s.ParentIn, Name: "vendor",
		Reason: "vendor failing", Gen: 7}
	if s.ParentForever {
		v.Until = 0
	}
	if s.Parent == "probe" {
		v.Lease = "parent-lease"
	}
	return v
}

func (s dstep) String() string {
	switch s.Op {
	case "allow":
		if s.Again {
			return fmt.Sprintf("allow   b%d %s again (the last allow's token)", s.Breaker, s.Worker)
		}
		if s.Parent != "" {
			return fmt.Sprintf("allow   b%d %s parent=%s in=%dms forever=%v", s.Breaker, s.Worker, s.Parent, s.ParentIn, s.ParentForever)
		}
		return fmt.Sprintf("allow   b%d %s", s.Breaker, s.Worker)
	case "record":
		return fmt.Sprintf("record  b%d %s %s ticket=%s retry_after=%dms deadline=%dms credential_worked=%v u=%g latency=%dms group=%d/%d quiet=%q",
			s.Breaker, s.Worker, s.Outcome, s.Ticket, s.RetryAfter, s.Deadline, s.Credential, s.U, s.latency(), s.Open, s.Known, s.Quiet)
	case "force":
		if s.Mode == "shadow" {
			return fmt.Sprintf("force   b%d shadow %s", s.Breaker, s.Shadow)
		}
		return fmt.Sprintf("force   b%d %s ttl=%dms", s.Breaker, s.Mode, s.TTL)
	case "read":
		return fmt.Sprintf("read    b%d", s.Breaker)
	case "recover":
		return fmt.Sprintf("recover b%d %s gen=%s", s.Breaker, s.Worker, s.Ticket)
	}
	return fmt.Sprintf("advance %dms", s.Ms)
}

func (s dstep) latency() int64 { return stdcmp.Or(s.Latency, 1500) }

// dcase is a sequence with its policy.
type dcase struct {
	Name   string  `json:"name"`
	Policy dpolicy `json:"policy"`
	Steps  []dstep `json:"steps"`
}

type dpolicy struct {
	Threshold      int     `json:"threshold"`
	MinWorkers     int     `json:"min_workers"`
	RateLimitTrips int     `json:"rate_limit_trips"`
	CooldownBaseMs int64   `json:"cooldown_base_ms"`
	CooldownCapMs  int64   `json:"cooldown_cap_ms"`
	Jitter         float64 `json:"jitter"`
	ProbeTimeoutMs int64   `json:"probe_timeout_ms"`
	PauseTTLMs     int64   `json:"pause_ttl_ms,omitempty"` // default 60000
	// Window mode when WindowMs > 0 (the committed cases predate it).
	WindowMs    int64   `json:"window_ms,omitempty"`
	FailureRate float64 `json:"failure_rate,omitempty"`
	MinCalls    int     `json:"min_calls,omitempty"`
	// Slow calls when SlowCallMs > 0: SlowCallThreshold in consecutive
	// mode, SlowCallRate in window mode.
	SlowCallMs        int64   `json:"slow_call_ms,omitempty"`
	SlowCallThreshold int     `json:"slow_call_threshold,omitempty"`
	SlowCallRate      float64 `json:"slow_call_rate,omitempty"`
	// MaxOpenFraction > 0 puts each breaker in a group of its own with
	// this cap and GroupMembers members (the breaker and others); the
	// group's other breakers are the steps' Known and Open.
	MaxOpenFraction float64 `json:"max_open_fraction,omitempty"`
	GroupMembers    int64   `json:"group_members,omitempty"`
	// Shadow is the policy's shadow mode.
	Shadow bool `json:"shadow,omitempty"`
	// CountUnrecognised is the policy's count_unrecognised.
	CountUnrecognised bool `json:"count_unrecognised,omitempty"`
}

func (p dpolicy) policy() policy.Policy {
	pol := policy.Policy{Threshold: p.Threshold, MinWorkers: p.MinWorkers, RateLimitTrips: p.RateLimitTrips,
		CooldownBase: time.Duration(p.CooldownBaseMs) * time.Millisecond,
		CooldownCap:  time.Duration(p.CooldownCapMs) * time.Millisecond, Jitter: p.Jitter,
		ProbeTimeout: time.Duration(p.ProbeTimeoutMs) * time.Millisecond, Alternatives: []string{"alt"},
		PauseTTL: time.Duration(stdcmp.Or(p.PauseTTLMs, 60000)) * time.Millisecond,
		Mode:     policy.ModeConsecutive, Window: time.Minute, FailureRate: 0.5, MinCalls: 10}
	if p.WindowMs > 0 {
		pol.Mode, pol.Window = policy.ModeWindow, time.Duration(p.WindowMs)*time.Millisecond
		pol.FailureRate, pol.MinCalls = p.FailureRate, p.MinCalls
	}
	pol.SlowCall = time.Duration(p.SlowCallMs) * time.Millisecond
	pol.SlowCallThreshold, pol.SlowCallRate = p.SlowCallThreshold, p.SlowCallRate
	pol.Shadow, pol.CountUnrecognised = p.Shadow, p.CountUnrecognised
	return pol
}

var (
	outcomes = []string{"SUCCESS", "TRANSPORT", "TIMEOUT", "SERVER_ERROR", "MALFORMED_OUTPUT", "RATE_LIMITED",
		"RATE_LIMITED", "RATE_LIMITED", "INVALID_ARGUMENT", "PERMISSION_DENIED", "NOT_FOUND", "CANCELED", "UNAUTHENTICATED",
		"QUOTA_EXHAUSTED", "UNRECOGNISED", "UNRECOGNISED"}
	// Boundaries of the policies below: cooldowns 10s..80s, probe 5s.
	retryAfters = []int64{0, 0, 1, 2999, 3000, 3001, 9999, 10000, 10001, 60000, 79999, 80000, 80001, 200000}
	deadlines   = []int64{0, 0, 3000, 5000, 10000}
	// Boundaries of slow_call (2000ms when drawn).
	latencies = []int64{1, 1500, 1999, 2000, 2001, 25000, 25000, 31000}
	advances  = []int64{1, 999, 1000, 4999, 5000, 5001, 9999, 10000, 10001, 19999, 20000, 20001, 39999, 40000, 60000, 80000, 80001}
)

// genCase draws a sequence. On a real Redis (ttl false) the whole sequence
// stays inside the keys' lifetimes: TTLs there run on wall time, which a
// test does not move.
func genCase(t *rapid.T) dcase {
	c := dcase{Policy: dpolicy{
		Threshold:      rapid.IntRange(1, 4).Draw(t, "threshold"),
		MinWorkers:     rapid.IntRange(1, 3).Draw(t, "min_workers"),
		RateLimitTrips: rapid.IntRange(1, 3).Draw(t, "rate_limit_trips"),
		CooldownBaseMs: 10000, CooldownCapMs: 80000,
		Jitter:         rapid.SampledFrom([]float64{0, 0.2}).Draw(t, "jitter"),
		ProbeTimeoutMs: 5000,
		PauseTTLMs:     rapid.SampledFrom([]int64{60000, 120000}).Draw(t, "pause_ttl"),
	}}
	if rapid.Bool().Draw(t, "window_mode") {
		c.Policy.WindowMs = rapid.SampledFrom([]int64{6000, 60000}).Draw(t, "window")
		c.Policy.FailureRate = rapid.SampledFrom([]float64{0.25, 0.5, 0.75, 1}).Draw(t, "failure_rate")
		c.Policy.MinCalls = rapid.IntRange(2, 5).Draw(t, "min_calls")
	}
	if rapid.Bool().Draw(t, "slow_calls") {
		c.Policy.SlowCallMs = 2000
		if c.Policy.WindowMs > 0 {
			c.Policy.SlowCallRate = rapid.SampledFrom([]float64{0.25, 0.5, 1}).Draw(t, "slow_call_rate")
		} else {
			c.Policy.SlowCallThreshold = rapid.IntRange(1, 3).Draw(t, "slow_call_threshold")
		}
	}
	if rapid.Bool().Draw(t, "group") {
		c.Policy.MaxOpenFraction = rapid.SampledFrom([]float64{0.25, 0.5, 0.75, 1}).Draw(t, "max_open_fraction")
		c.Policy.GroupMembers = rapid.Int64Range(1, 6).Draw(t, "group_members")
	}
	c.Policy.Shadow = rapid.Bool().Draw(t, "shadow")
	c.Policy.CountUnrecognised = rapid.Bool().Draw(t, "count_unrecognised")
	workers := []string{"w1", "w2", "w3"}
	n := rapid.IntRange(1, 60).Draw(t, "steps")
	var lastAllow *dstep
	for range n {
		var s dstep
		switch op := rapid.IntRange(0, 99).Draw(t, "op"); {
		case op < 30:
			s = dstep{Op: "allow", Again: rapid.IntRange(0, 5).Draw(t, "again") == 0}
			if rapid.IntRange(0, 2).Draw(t, "has_parent") == 0 {
				s.Parent = rapid.SampledFrom([]string{"allowed", "probe", "open", "in_flight", "forced", "paused"}).Draw(t, "parent")
				s.ParentIn = rapid.SampledFrom([]int64{-5000, -1, 0, 1, 5000}).Draw(t, "parent_in")
				s.ParentForever = rapid.IntRange(0, 5).Draw(t, "parent_forever") == 0
			}
		case op < 75:
			s = dstep{Op: "record",
				Outcome:    rapid.SampledFrom(outcomes).Draw(t, "outcome"),
				Ticket:     rapid.SampledFrom([]string{"current", "current", "current", "stale", "forged", "none"}).Draw(t, "ticket"),
				RetryAfter: rapid.SampledFrom(retryAfters).Draw(t, "retry_after"),
				Deadline:   rapid.SampledFrom(deadlines).Draw(t, "deadline"),
				Credential: rapid.Bool().Draw(t, "credential_worked"),
				U:          rapid.SampledFrom([]float64{0, 0.5, 0.999}).Draw(t, "u"),
				Latency:    rapid.SampledFrom(latencies).Draw(t, "latency"),
				Quiet:      rapid.SampledFrom([]string{"", "", "quiet", "summary:3:pool"}).Draw(t, "quiet")}
			if c.Policy.MaxOpenFraction > 0 {
				s.Known = rapid.Int64Range(0, c.Policy.GroupMembers-1).Draw(t, "known")
				s.Open = rapid.Int64Range(0, s.Known).Draw(t, "open")
			}
		case op < 80:
			s = dstep{Op: "force", Mode: rapid.SampledFrom([]string{"open", "closed", "auto", "shadow", "shadow"}).Draw(t, "mode")}
			if s.Mode == "shadow" {
				s.Shadow = rapid.SampledFrom([]string{"on", "off", "policy"}).Draw(t, "shadow_setting")
			} else {
				s.TTL = rapid.SampledFrom([]int64{0, 0, 1000, 10000}).Draw(t, "ttl")
			}
		case op < 83:
			s = dstep{Op: "read"}
		case op < 87:
			s = dstep{Op: "recover", Ticket: rapid.SampledFrom([]string{"current", "current", "stale"}).Draw(t, "gen")}
		default:
			s = dstep{Op: "advance", Ms: rapid.SampledFrom(advances).Draw(t, "advance")}
		}
		if s.Op != "advance" {
			s.Breaker = rapid.IntRange(0, 1).Draw(t, "breaker")
			s.Worker = rapid.SampledFrom(workers).Draw(t, "worker")
		}
		if s.Op == "record" && lastAllow != nil && rapid.IntRange(0, 3).Draw(t, "settle") == 0 {
			// The worker settles the call it was just let out for (often
			// a probe): a success or a failure, on a current ticket, so
			// that probes pass and breakers flap.
			s.Breaker, s.Worker, s.Ticket = lastAllow.Breaker, lastAllow.Worker, "current"
			s.Outcome = rapid.SampledFrom([]string{"SUCCESS", "SUCCESS", "TIMEOUT"}).Draw(t, "settle_outcome")
		}
		if s.Again && lastAllow != nil && rapid.Bool().Draw(t, "same_call") {
			// Mostly the same call sent again, as go-redis resends it.
			s = *lastAllow
			s.Again = true
		}
		if s.Op == "allow" {
			lastAllow = &s
		}
		c.Steps = append(c.Steps, s)
	}
	return c
}

// harness runs sequences on one backend and the machine side by side.
type harness struct {
	b  *testredis.Backend
	st *store.Store
	// The clock every script decides by, pinned (ms), and the next
	// jitter draw and lease token the store will use.
	now   atomic.Int64
	u     atomic.Uint64
	token atomic.Int64
	// again makes the next token the last one again (dstep.Again).
	again atomic.Bool
	seq   atomic.Int64
	pol   atomic.Pointer[policy.Policy]
	// feed is the events channel's live feed: run notices are compared
	// there (they are never in the stream).
	feed    <-chan *redis.Message
	channel string
	marks   atomic.Int64
	// quiet is the alert mark the next Record gets (dstep.Quiet), alerts
	// what the store told the quota the last Record raised.
	quiet  atomic.Pointer[string]
	alerts atomic.Int64
	// cleanup are keys to delete when the test ends.
	cleanup []string
}

func newHarness(t *testing.T, b *testredis.Backend) *harness {
	h := &harness{b: b}
	h.now.Store(1_800_000_000_000)
	pol := policy.Default()
	h.pol.Store(&pol)
	h.st = store.New(b.Client, store.Options{
		Now:  func() time.Time { return time.UnixMilli(h.now.Load()) },
		Rand: func() float64 { return math.Float64frombits(h.u.Load()) },
		NewToken: func() string {
			if h.again.Swap(false) {
				return "t" + strconv.FormatInt(h.token.Load(), 10)
			}
			return "t" + strconv.FormatInt(h.token.Add(1), 10)
		},
		Channel: b.Prefix + "events",
	})
	if err := h.st.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.st.SetAlertQuota(harnessQuota{h})
	h.channel = b.Prefix + "events"
	ps := b.Client.Subscribe(context.Background(), h.channel)
	t.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.feed = ps.Channel()
	t.Cleanup(func() {
		for _, k := range h.cleanup {
			_ = b.Client.Del(context.Background(), k).Err()
		}
	})
	return h
}

// harnessQuota gives each Record its step's alert mark and keeps the
// count of alerts the store reports.
type harnessQuota struct{ h *harness }

func (q harnessQuota) Quiet(context.Context) string {
	if m := q.h.quiet.Load(); m != nil {
		return *m
	}
	return ""
}

func (q harnessQuota) Raised(_ context.Context, _ string, n int64) { q.h.alerts.Store(n) }

// markScript publishes a marker from the node that holds KEYS[1].
var markScript = redis.NewScript(`return redis.call('PUBLISH', ARGV[1], ARGV[2])`)

// notices returns the run notices published for name since the last call:
// it publishes a marker and reads the feed up to it. The marker is
// published by a script on name's key, so on a Cluster it leaves from the
// node that ran the breaker's script: one node's PUBLISHes reach a
// subscriber in order, while two nodes' may cross on the cluster bus.
func (h *harness) notices(name string, fatalf func(string, ...any)) []string {
	mark := "mark-" + strconv.FormatInt(h.marks.Add(1), 10)
	if err := markScript.Run(context.Background(), h.b.Client, []string{store.KeysOf(name).State}, h.channel, mark).Err(); err != nil {
		fatalf("PUBLISH: %v", err)
	}
	var got []string
	for m := range h.feed {
		if m.Payload == mark {
			return got
		}
		e, err := store.DecodeEvent([]byte(m.Payload))
		if err != nil {
			continue // another marker
		}
		if store.IsNotice(e) {
			if e.GetBreaker() != name || e.GetId() != "" {
				fatalf("notice %v: want one for %q with no id", e, name)
			}
			got = append(got, strings.ToLower(strings.TrimPrefix(e.GetKind().String(), "EVENT_KIND_")))
		}
	}
	fatalf("events feed closed")
	return nil
}

// run replays c, failing fatalf at the first difference.
func (h *harness) run(c dcase, logf, fatalf func(string, ...any)) {
	ctx := context.Background()
	seq := h.seq.Add(1)
	names := []string{h.b.Breaker(fmt.Sprintf("s%d-b0", seq)), h.b.Breaker(fmt.Sprintf("s%d-b1", seq))}
	p := c.Policy.policy()
	if err := p.Validate(); err != nil {
		fatalf("policy: %v", err)
	}
	set := policy.NewSet(p)
	var groups []*policy.Group
	if f := c.Policy.MaxOpenFraction; f > 0 {
		for i, n := range names {
			members := []string{n}
			for k := range c.Policy.GroupMembers - 1 {
				members = append(members, fmt.Sprintf("other-%d", k))
			}
			groups = append(groups, &policy.Group{Name: fmt.Sprintf("%sg%d-%d", h.b.Prefix, seq, i), Members: members, MaxOpenFraction: f})
		}
		set = set.WithGroups(*groups[0], *groups[1])
		h.cleanGroups(groups)
	}
	h.st.SetPolicies(set)
	group := func(name string) *policy.Group {
		for i, n := range names {
			if n == name && groups != nil {
				return groups[i]
			}
		}
		return nil
	}
	// stateOf is what the store answers for a breaker in view v.
	stateOf := func(v breaker.View, name string) *pb.BreakerState {
		st := store.StateOf(v, name, p)
		if g := group(name); g != nil {
			st.Group, st.MaxOpenFraction, st.GroupMembers = g.Name, g.MaxOpenFraction, int64(len(g.Members))
		}
		return st
	}
	seeded := map[string]dstep{}
	ttl := h.b.Mini != nil
	retention := p.Retention().Milliseconds()
	if !ttl {
		retention = 1 << 50 // a real Redis's TTLs run on wall time: nothing lapses here
	}
	table := breaker.NewTable()
	tickets := map[string]*pb.Ticket{}
	lastEvent := map[string]string{names[0]: "0", names[1]: "0"}

	for i, s := range c.Steps {
		logf("%2d %s", i, s)
		now := h.now.Load()
		name := names[s.Breaker]
		params := store.ParamsOf(p, s.U)
		params.Retention = retention
		h.u.Store(math.Float64bits(s.U))
		var events []breaker.Event
		switch s.Op {
		case "advance":
			h.now.Add(s.Ms)
			if h.b.Mini != nil {
				h.b.Mini.FastForward(time.Duration(s.Ms) * time.Millisecond)
			}
			continue
		case "allow":
			pv := s.parent(now)
			h.again.Store(s.Again)
			got, due, err := h.st.AllowUnder(ctx, name, s.Worker, pv)
			if err != nil {
				fatalf("Allow: %v", err)
			}
			token := "t" + strconv.FormatInt(h.token.Load(), 10)
			res, v, ev := table.Apply(name, params, breaker.Call{Op: breaker.OpAllow, Actor: s.Worker, Token: token, Parent: pv}, now)
			events = ev
			want := store.AllowAnswer(name, s.Worker, res, v, token, stateOf(v, name), pv)
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				fatalf("Allow(%q, %q): Lua and machine differ (-machine +lua):\n%s", name, s.Worker, diff)
			}
			if due != res.ParentDue {
				fatalf("Allow(%q, %q): Lua says the parent is due: %v, machine %v", name, s.Worker, due, res.ParentDue)
			}
			if got.Decision == pb.Decision_DECISION_ALLOWED || got.Decision == pb.Decision_DECISION_PROBE {
				tickets[name+"/"+s.Worker] = got.Ticket
			}
		case "record":
			req := &pb.RecordRequest{Breaker: name, WorkerId: s.Worker, Outcome: pb.Outcome(pb.Outcome_value["OUTCOME_"+s.Outcome]),
				RetryAfterMs: s.RetryAfter, DeadlineMs: s.Deadline, CredentialWorked: s.Credential, LatencyMs: s.latency()}
			if i%3 != 0 { // most calls traced: a trip's event carries its call's trace id
				req.TraceId = fmt.Sprintf("%032x", i+1)
			}
			cur := tickets[name+"/"+s.Worker]
			switch s.Ticket {
			case "current":
				req.Ticket = cur
			case "stale":
				req.Ticket = &pb.Ticket{Generation: cur.GetGeneration() - 1, LeaseToken: cur.GetLeaseToken(),
					ShadowDenied: cur.GetShadowDenied()}
			case "forged":
				st, _ := table.State(name, now)
				req.Ticket = &pb.Ticket{Generation: st.Gen, LeaseToken: "forged"}
			}
			if g := group(name); g != nil {
				h.seedGroup(g, s, fatalf)
				seeded[name] = s
			}
			h.quiet.Store(&s.Quiet)
			h.alerts.Store(-1)
			got, err := h.st.Record(ctx, req)
			if err != nil {
				fatalf("Record: %v", err)
			}
			in, err := store.NewRecordInput(req, set, time.UnixMilli(now))
			if err != nil {
				fatalf("NewRecordInput: %v", err)
			}
			call := in.Call
			call.Group = breaker.GroupCounts{Open: s.Open}
			call.Quiet = s.Quiet
			if g := group(name); g != nil {
				params.MaxOpenPPM, params.GroupMembers = g.MaxOpenPPM(), int64(len(g.Members))
			}
			res, v, ev := table.Apply(name, params, call, now)
			events = ev
			var alerts int64
			for _, e := range ev {
				if breaker.Alert(e.Kind) {
					alerts++
				}
			}
			if got := h.alerts.Load(); got != alerts {
				fatalf("Record(%q, %q, %s): the store reported %d alerts raised, the machine %d", name, s.Worker, s.Outcome, got, alerts)
			}
			want := &pb.RecordResponse{Counted: res.Counted, Note: res.Note.String(), State: stateOf(v, name)}
			if params.WindowMs > 0 { // window mode: the window after the call
				cur, _ := table.State(name, now)
				t := breaker.WindowOf(cur, params.WindowMs, now)
				want.State.WindowCalls, want.State.WindowFailures, want.State.SlowCalls = t.Calls, t.Fails, t.Slow
			}
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				fatalf("Record(%q, %q, %s): Lua and machine differ (-machine +lua):\n%s", name, s.Worker, s.Outcome, diff)
			}
			var wantNotices []string
			if res.Notice != breaker.NoticeNone {
				wantNotices = []string{string(res.Notice)}
			}
			if diff := cmp.Diff(wantNotices, h.notices(name, fatalf)); diff != "" {
				fatalf("Record(%q, %q, %s): run notices differ (-machine +lua):\n%s", name, s.Worker, s.Outcome, diff)
			}
		case "force":
			mode := map[string]pb.ForceMode{"open": pb.ForceMode_FORCE_MODE_OPEN, "closed": pb.ForceMode_FORCE_MODE_CLOSED,
				"auto": pb.ForceMode_FORCE_MODE_AUTO}[s.Mode]
			var got *pb.BreakerState
			var err error
			setting := ""
			if s.Mode == "shadow" {
				if s.Shadow != "policy" {
					setting = s.Shadow
				}
				got, err = h.st.SetShadow(ctx, name, breaker.ShadowSettingOf(setting), "op reason", "ops")
			} else {
				got, err = h.st.Force(ctx, name, mode, "op reason", time.Duration(s.TTL)*time.Millisecond, "ops")
			}
			if err != nil {
				fatalf("Force: %v", err)
			}
			_, v, ev := table.Apply(name, params, breaker.Call{Op: breaker.OpForce, Actor: "ops", Mode: s.Mode,
				Shadow: setting, Reason: "op reason", TTL: s.TTL}, now)
			events = ev
			if diff := cmp.Diff(stateOf(v, name), got, protocmp.Transform()); diff != "" {
				fatalf("Force(%q, %s): Lua and machine differ (-machine +lua):\n%s", name, s.Mode, diff)
			}
		case "recover":
			// A daemon's recovery check succeeded; it saw the breaker at
			// the current generation, or at one before (the breaker moved
			// while the check ran).
			st, _ := table.State(name, now)
			gen := st.Gen
			if s.Ticket == "stale" {
				gen--
			}
			moved, got, err := h.st.Recover(ctx, name, "d-"+s.Worker, gen)
			if err != nil {
				fatalf("Recover: %v", err)
			}
			res, v, ev := table.Apply(name, params, store.RecoverCall("d-"+s.Worker, gen), now)
			events = ev
			if want := res.Note == breaker.NoteRecovered; moved != want {
				fatalf("Recover(%q, gen %d): Lua moved=%v, machine %v", name, gen, moved, want)
			}
			if diff := cmp.Diff(stateOf(v, name), got, protocmp.Transform()); diff != "" {
				fatalf("Recover(%q, gen %d): Lua and machine differ (-machine +lua):\n%s", name, gen, diff)
			}
		case "read":
			got, err := h.st.Get(ctx, name)
			if err != nil {
				fatalf("Get: %v", err)
			}
			st, _ := table.State(name, now)
			want := stateOf(breaker.Read(st, now), name)
			if g := group(name); g != nil {
				// The group's counts: the seeded others, and the breaker
				// itself as its index holds it (compareGroup checks that).
				sd := seeded[name]
				want.GroupKnown, want.GroupOpen = sd.Known, sd.Open
				if h.b.Name == "cluster" {
					want.GroupKnown, want.GroupOpen = got.GroupKnown, got.GroupOpen
				} else {
					if len(st.Fields()) > 0 {
						want.GroupKnown++
					}
					if len(st.Fields()) > 0 && st.OpenAt(now) {
						want.GroupOpen++
					}
				}
			}
			w := breaker.WindowOf(st, params.WindowMs, now)
			want.WindowCalls, want.WindowFailures = w.Calls, w.Fails
			if params.WindowMs > 0 {
				want.SlowCalls = w.Slow
			}
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				fatalf("Get(%q): Lua and machine differ (-machine +lua):\n%s", name, diff)
			}
		}
		h.compareStored(name, table, now, ttl, fatalf)
		h.compareGroup(name, group(name), table, now, ttl, fatalf)
		h.compareWindow(name, table, params.WindowMs, now, fatalf)
		h.compareEvents(name, lastEvent, events, fatalf)
	}
}

// compareStored compares what Redis holds for name with the machine's
// state: the hash, both worker sets and, on miniredis, the TTL.
func (h *harness) compareStored(name string, table *breaker.Table, now int64, ttl bool, fatalf func(string, ...any)) {
	ctx := context.Background()
	want, expires := table.State(name, now)
	k := store.KeysOf(name)
	hash, err := h.b.Client.HGetAll(ctx, k.State).Result()
	if err != nil {
		fatalf("HGETALL: %v", err)
	}
	if diff := cmp.Diff(want.Fields(), hash); diff != "" {
		fatalf("stored state of %q differs (-machine +lua):\n%s", name, diff)
	}
	for _, set := range []struct {
		key  string
		want []string
	}{{k.Workers, want.Workers}, {k.RL, want.RLWorkers}, {k.Pause, want.Pausers}} {
		got, err := h.b.Client.SMembers(ctx, set.key).Result()
		if err != nil {
			fatalf("SMEMBERS: %v", err)
		}
		slices.Sort(got)
		if len(got) == 0 {
			got = nil
		}
		if diff := cmp.Diff(set.want, got); diff != "" {
			fatalf("%s differs (-machine +lua):\n%s", set.key, diff)
		}
	}
	if ttl && len(hash) > 0 {
		pttl, err := h.b.Client.PTTL(ctx, k.State).Result()
		if err != nil {
			fatalf("PTTL: %v", err)
		}
		wantTTL := time.Duration(-1)
		if expires != 0 {
			wantTTL = time.Duration(expires-now) * time.Millisecond
		}
		if pttl != wantTTL {
			fatalf("TTL of %s = %v, machine says %v", k.State, pttl, wantTTL)
		}
	}
}

// seedGroup makes the index of g hold s.Known other breakers, s.Open of
// them open (scored far ahead: they never expire here), beside whatever
// the scripts keep there for the breaker itself.
func (h *harness) seedGroup(g *policy.Group, s dstep, fatalf func(string, ...any)) {
	ctx := context.Background()
	known, open := store.GroupKeys(g.Name)
	_, err := h.b.Client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 6 {
			p.ZRem(ctx, known, fmt.Sprintf("other-%d", i))
			p.ZRem(ctx, open, fmt.Sprintf("other-%d", i))
		}
		for i := range s.Known {
			p.ZAdd(ctx, known, redis.Z{Score: 1 << 52, Member: fmt.Sprintf("other-%d", i)})
		}
		for i := range s.Open {
			p.ZAdd(ctx, open, redis.Z{Score: 1 << 52, Member: fmt.Sprintf("other-%d", i)})
		}
		return nil
	})
	if err != nil {
		fatalf("seed group: %v", err)
	}
}

// cleanGroups deletes the groups' index keys when the test ends (the
// backend's cleanup deletes only breakers' keys).
func (h *harness) cleanGroups(groups []*policy.Group) {
	for _, g := range groups {
		known, open := store.GroupKeys(g.Name)
		h.cleanup = append(h.cleanup, known, open)
	}
}

// compareGroup checks the breaker's own entries in its group's index on a
// single Redis, where the scripts keep them atomically: known while the
// machine's state holds fields, open while it denies and its pin or pause
// has not lapsed, scored (on miniredis, where TTLs move with the clock)
// when the state expires, or the open entry when the pin or pause ends.
func (h *harness) compareGroup(name string, g *policy.Group, table *breaker.Table, now int64, ttl bool, fatalf func(string, ...any)) {
	if g == nil || h.b.Name == "cluster" {
		return
	}
	ctx := context.Background()
	want, expires := table.State(name, now)
	holds := len(want.Fields()) > 0
	known, open := store.GroupKeys(g.Name)
	openUntil := want.OpenUntil()
	openScore := float64(expires)
	if expires == 0 {
		openScore = math.Inf(1)
	}
	if openUntil > 0 {
		openScore = float64(openUntil)
	}
	for _, set := range []struct {
		key   string
		want  bool
		score float64
	}{{known, holds, float64(expires)}, {open, holds && want.OpenAt(now), openScore}} {
		// An entry scored now or before is an expired breaker's: every
		// reader drops it first.
		score, err := h.b.Client.ZScore(ctx, set.key, name).Result()
		in := err == nil && score > float64(now)
		if err != nil && err != redis.Nil {
			fatalf("ZSCORE: %v", err)
		}
		if in != set.want {
			fatalf("%s holds %q: %v, machine says %v (state %v)", set.key, name, in, set.want, want.Fields())
		}
		if !in || !ttl {
			continue
		}
		wantScore := set.score
		if expires == 0 {
			wantScore = math.Inf(1)
		}
		if set.key == open && openUntil > 0 {
			wantScore = float64(openUntil)
		}
		if score != wantScore {
			fatalf("%s scores %q %v, machine says it expires at %v", set.key, name, score, wantScore)
		}
	}
}

// compareWindow compares the failure-rate window Redis holds for name
// (window mode) with the machine's, as both stand at now: calls,
// failures and failing workers. (Buckets that fell out of the window may
// linger in either until the next write or the key's TTL.)
func (h *harness) compareWindow(name string, table *breaker.Table, windowMs, now int64, fatalf func(string, ...any)) {
	if windowMs == 0 {
		return
	}
	want, _ := table.State(name, now)
	raw, err := h.b.Client.HGetAll(context.Background(), store.KeysOf(name).Window).Result()
	if err != nil {
		fatalf("HGETALL: %v", err)
	}
	got := want
	got.Win = breaker.WindowFromFields(raw)
	if diff := cmp.Diff(breaker.WindowOf(want, windowMs, now), breaker.WindowOf(got, windowMs, now)); diff != "" {
		fatalf("window of %q differs (-machine +lua):\n%s", name, diff)
	}
}

// compareEvents compares the entries appended to name's stream since the
// last step with the machine's events, field by field as stored.
func (h *harness) compareEvents(name string, last map[string]string, events []breaker.Event, fatalf func(string, ...any)) {
	msgs, err := h.b.Client.XRange(context.Background(), store.KeysOf(name).Events, "("+last[name], "+").Result()
	if err != nil {
		fatalf("XRANGE: %v", err)
	}
	var got, want []map[string]any
	for _, m := range msgs {
		got = append(got, m.Values)
		last[name] = m.ID
	}
	for _, e := range events {
		w := map[string]any{"breaker": name, "kind": e.Kind, "from": e.From, "to": e.To,
			"gen": itoa(e.Gen), "cause": string(e.Cause), "failures": itoa(e.Fails), "workers": itoa(e.Workers),
			"rl": itoa(e.RL), "cooldown_ms": itoa(e.Cooldown), "at_ms": itoa(e.At), "actor": e.Actor,
			"last": e.Last, "note": e.Note}
		if e.Shadow {
			w["shadow"] = "1"
		}
		if e.Quiet != "" {
			w["quiet"] = e.Quiet
		}
		if e.Trace != "" {
			w["trace"] = e.Trace
		}
		want = append(want, w)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		fatalf("events of %q differ (-machine +lua):\n%s", name, diff)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// DifferentialTier is the test tier (testredis.EnvTiers) in which
// TestDifferential checks 500 random sequences on miniredis, not 100.
const DifferentialTier = "differential"

// TestDifferential: random sequences, 100 on each backend, 500 on
// miniredis (where TTLs move with the clock) in DifferentialTier.
func TestDifferential(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		if b.Mini == nil {
			differential(t, b)
			return
		}
		// On miniredis, rounds side by side, each on a server of its own:
		// one in the unit tier, 5 in the differential tier (CI's unit pass).
		rounds := 1
		if testredis.TierOn(DifferentialTier) {
			rounds = 5
		}
		for i := range rounds {
			t.Run(fmt.Sprintf("round%d", i+1), func(t *testing.T) {
				t.Parallel()
				differential(t, testredis.Mini(t))
			})
		}
	})
}

// differential checks 100 random sequences on b (rapid's default count).
func differential(t *testing.T, b *testredis.Backend) {
	h := newHarness(t, b)
	var checked atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		c := genCase(rt)
		if b.Mini == nil {
			c.Steps = withinTTL(c)
		}
		js, _ := json.Marshal(c)
		rt.Logf("replay: save this JSON as testdata/differential/<name>.json\n%s", js)
		h.run(c, rt.Logf, rt.Fatalf)
		checked.Add(1)
	})
	t.Logf("%s: %d sequences checked, Lua and machine agree", b.Name, checked.Load())
	if checked.Load() < 100 {
		t.Errorf("only %d sequences checked, want 100", checked.Load())
	}
}

// withinTTL drops the advances that would carry a sequence past the
// shortest key lifetime (the retention) on a real Redis.
func withinTTL(c dcase) []dstep {
	limit := c.Policy.CooldownCapMs + c.Policy.ProbeTimeoutMs
	var total int64
	var out []dstep
	for _, s := range c.Steps {
		if s.Op == "advance" {
			if total+s.Ms >= limit {
				continue
			}
			total += s.Ms
		}
		out = append(out, s)
	}
	return out
}

// TestDifferentialCases replays the committed sequences: the faults the
// machine settled and every shrunk failure found so far.
func TestDifferentialCases(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/differential/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no committed sequences in testdata/differential (%v)", err)
	}
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		h := newHarness(t, b)
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var c dcase
			if err := json.Unmarshal(raw, &c); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
				h.run(c, t.Logf, t.Fatalf)
			})
		}
	})
}
