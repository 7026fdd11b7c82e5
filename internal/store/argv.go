package store

import (
	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/policy"
)

// A script's ARGV is built from a struct whose fields are in ARGV order,
// each tagged with the name the Lua binds the value to (`local NAME =
// ARGV[n]`); its appendTo method appends them in that order.
// TestArgvFollowsTheLua holds the fields to the Lua's bindings and
// appendTo to the fields. The values keep the types the scripts read
// (booleans as boolArg, ms as int64), and appendTo fills a slice the
// caller sized with pointers to them, which go-redis writes as the values
// they point to: a pointer goes into an interface without an allocation of
// its own, where a string or an int64 past 255 would take one each, so the
// whole ARGV costs its struct and its slice. A struct whose fields are
// appended must not change until its script's reply is in.

// commonArgv is the ARGV every script starts with (lib.lua, ARGV[1..7]).
type commonArgv struct {
	Name      string `lua:"NAME"`
	Pinned    int64  `lua:"PINNED"`    // ms since the epoch; 0: Redis TIME
	Retention int64  `lua:"RETENTION"` // ms
	// The Store's fixed arguments, converted to interfaces once (fixedArgs).
	EventsMaxLen    any    `lua:"EVENTS_MAXLEN"`
	EventsRetention any    `lua:"EVENTS_RETENTION"` // ms
	Channel         any    `lua:"CHANNEL"`
	Actor           string `lua:"ACTOR"`
}

// commonArgc is how many values commonArgv appends.
const commonArgc = 7

func (a *commonArgv) appendTo(dst []any) []any {
	return append(dst, &a.Name, &a.Pinned, &a.Retention, a.EventsMaxLen, a.EventsRetention, a.Channel, &a.Actor)
}

// commonArgv returns the ARGV every script starts with, for a call on
// breaker by actor under policy p.
func (s *Store) commonArgv(breaker, actor string, p policy.Policy) commonArgv {
	var pinned int64
	if s.o.Now != nil {
		pinned = s.o.Now().UnixMilli()
	}
	return commonArgv{Name: breaker, Pinned: pinned, Retention: p.Retention().Milliseconds(),
		EventsMaxLen: s.fixedArgs[0], EventsRetention: s.fixedArgs[1], Channel: s.fixedArgs[2], Actor: actor}
}

// common returns the ARGV every script starts with (commonArgv), with
// room for the more arguments of the script itself, so that appending them
// does not copy the slice.
func (s *Store) common(breaker, actor string, p policy.Policy, more int) []any {
	c := s.commonArgv(breaker, actor, p)
	return c.appendTo(make([]any, 0, commonArgc+more))
}

// allowArgv is allow.lua's ARGV (its header says what each value means).
type allowArgv struct {
	commonArgv
	Token        string  `lua:"TOKEN"`
	ProbeTimeout int64   `lua:"PROBE_TIMEOUT"` // ms
	CooldownBase int64   `lua:"COOLDOWN_BASE"` // ms
	Jitter       float64 `lua:"JITTER"`
	PolicyShadow string  `lua:"POLICY_SHADOW"` // boolArg
	Parent       int64   `lua:"PARENT"`
	ParentUntil  int64   `lua:"PARENT_UNTIL"` // ms since the epoch
}

// allowArgc is how many values allowArgv appends.
const allowArgc = commonArgc + 7

// args returns a's values as allow.lua's ARGV, in order.
func (a *allowArgv) args() []any {
	return append(a.appendTo(make([]any, 0, allowArgc)),
		&a.Token, &a.ProbeTimeout, &a.CooldownBase, &a.Jitter, &a.PolicyShadow, &a.Parent, &a.ParentUntil)
}

// recordArgv is record.lua's ARGV (its header says what each value means).
type recordArgv struct {
	commonArgv
	Evidence         string  `lua:"EVIDENCE"`
	TicketGen        int64   `lua:"TICKET_GEN"`
	TicketLease      string  `lua:"TICKET_LEASE"`
	RetryAfter       int64   `lua:"RETRY_AFTER"` // ms
	Last             string  `lua:"LAST"`
	Threshold        int64   `lua:"THRESHOLD"`
	MinWorkers       int64   `lua:"MIN_WORKERS"`
	RateLimitTrips   int64   `lua:"RATE_LIMIT_TRIPS"`
	CooldownBase     int64   `lua:"COOLDOWN_BASE"` // ms
	CooldownCap      int64   `lua:"COOLDOWN_CAP"`  // ms
	Jitter           float64 `lua:"JITTER"`
	CredentialWorked string  `lua:"CREDENTIAL_WORKED"` // boolArg
	PauseTTL         int64   `lua:"PAUSE_TTL"`         // ms
	WindowMs         int64   `lua:"WINDOW_MS"`
	FailureRate      float64 `lua:"FAILURE_RATE"`
	MinCalls         int64   `lua:"MIN_CALLS"`
	Latency          int64   `lua:"LATENCY"`   // ms
	SlowCall         int64   `lua:"SLOW_CALL"` // ms
	SlowThreshold    int64   `lua:"SLOW_THRESHOLD"`
	SlowRate         float64 `lua:"SLOW_RATE"`
	PolicyShadow     string  `lua:"POLICY_SHADOW"` // boolArg
	TicketShadow     string  `lua:"TICKET_SHADOW"` // boolArg
	MaxOpenPPM       int64   `lua:"MAX_OPEN_PPM"`
	GroupMembers     int64   `lua:"GROUP_MEMBERS"`
	GroupOpen        any     `lua:"GROUP_OPEN"` // "" or an int64 (groupCap)
	Quiet            string  `lua:"QUIET"`
	RecordID         string  `lua:"RECORD_ID"`
	RecordTTL        int64   `lua:"RECORD_TTL"` // ms
	MayCreate        string  `lua:"MAY_CREATE"` // boolArg
	RecordKeep       int64   `lua:"RECORD_KEEP"`
	Trace            string  `lua:"TRACE"`
}

// recordArgc is how many values recordArgv appends.
const recordArgc = commonArgc + 31

// recordArgv returns record.lua's ARGV for call c from worker on breaker
// name under policy p and its params, up to the group's members; the
// caller sets the rest.
func (s *Store) recordArgv(name, worker string, c breaker.Call, p policy.Policy, params breaker.Params) recordArgv {
	return recordArgv{commonArgv: s.commonArgv(name, worker, p),
		Evidence: string(c.Evidence), TicketGen: c.Ticket.Gen, TicketLease: c.Ticket.Lease,
		RetryAfter: c.RetryAfter, Last: c.Last,
		Threshold: params.Rule.Threshold, MinWorkers: params.Rule.MinWorkers, RateLimitTrips: params.Rule.RateLimitTrips,
		CooldownBase: params.CooldownBase, CooldownCap: params.CooldownCap, Jitter: params.Jitter,
		CredentialWorked: boolArg(c.CredentialWorked), PauseTTL: params.PauseTTL,
		WindowMs: params.WindowMs, FailureRate: params.FailureRate, MinCalls: params.MinCalls,
		Latency: c.Latency, SlowCall: params.SlowCallMs, SlowThreshold: params.SlowCallThreshold, SlowRate: params.SlowCallRate,
		PolicyShadow: boolArg(params.Shadow), TicketShadow: boolArg(c.Ticket.Shadow),
		MaxOpenPPM: params.MaxOpenPPM, GroupMembers: params.GroupMembers}
}

// args returns a's values as record.lua's ARGV, in order.
func (a *recordArgv) args() []any {
	return append(a.appendTo(make([]any, 0, recordArgc)),
		&a.Evidence, &a.TicketGen, &a.TicketLease, &a.RetryAfter, &a.Last,
		&a.Threshold, &a.MinWorkers, &a.RateLimitTrips,
		&a.CooldownBase, &a.CooldownCap, &a.Jitter,
		&a.CredentialWorked, &a.PauseTTL,
		&a.WindowMs, &a.FailureRate, &a.MinCalls,
		&a.Latency, &a.SlowCall, &a.SlowThreshold, &a.SlowRate,
		&a.PolicyShadow, &a.TicketShadow,
		&a.MaxOpenPPM, &a.GroupMembers, a.GroupOpen,
		&a.Quiet, &a.RecordID, &a.RecordTTL, &a.MayCreate, &a.RecordKeep, &a.Trace)
}
