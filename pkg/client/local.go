package client

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/quorum"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// FallbackMode says what Allow answers while breakerd is unreachable.
type FallbackMode int

const (
	// FailOpenLocal (the default) answers from a breaker local to this
	// worker, with breakerd's rules: calls go out until this worker alone
	// sees the threshold of consecutive failures, then its local circuit
	// opens, cools down and probes.
	FailOpenLocal FallbackMode = iota
	// FailClosed denies every call while breakerd is unreachable.
	FailClosed
)

// LocalPolicy tunes the local fallback breaker. A zero field takes
// breakerd's default. There is no quorum: the local breaker sees one
// worker.
type LocalPolicy struct {
	// Threshold is how many consecutive counted failures open the local
	// circuit. Default 5.
	Threshold int
	// RateLimitTrips is how many consecutive 429s with a Retry-After beyond
	// the caller's deadline open it, for that Retry-After. Default 3.
	RateLimitTrips int
	// CooldownBase is the first open period; each failed probe doubles it
	// up to CooldownCap. Defaults 30s and 15m. No jitter: one worker.
	CooldownBase time.Duration
	CooldownCap  time.Duration
	// ProbeTimeout is how long a local probe holds the one probe slot.
	// Default 30s.
	ProbeTimeout time.Duration
}

func (p LocalPolicy) withDefaults() LocalPolicy {
	if p.Threshold <= 0 {
		p.Threshold = 5
	}
	if p.RateLimitTrips <= 0 {
		p.RateLimitTrips = 3
	}
	if p.CooldownBase <= 0 {
		p.CooldownBase = 30 * time.Second
	}
	if p.CooldownCap < p.CooldownBase {
		p.CooldownCap = max(15*time.Minute, p.CooldownBase)
	}
	if p.ProbeTimeout <= 0 {
		p.ProbeTimeout = 30 * time.Second
	}
	return p
}

// localBreaker is the in-process fallback: breakerd's own state machine
// (internal/breaker, the rules the daemon's scripts are proven against)
// over the breakers this worker calls, with a quorum of one: it sees one
// worker. It is safe for concurrent use.
type localBreaker struct {
	pol    LocalPolicy
	params breaker.Params
	now    func() time.Time
	table  *breaker.Table
	leases atomic.Int64
}

func newLocalBreaker(p LocalPolicy, now func() time.Time) *localBreaker {
	p = p.withDefaults()
	return &localBreaker{pol: p, now: now, table: breaker.NewTable(), params: breaker.Params{
		Rule:         quorum.Rule{Threshold: int64(p.Threshold), MinWorkers: 1, RateLimitTrips: int64(p.RateLimitTrips)},
		CooldownBase: p.CooldownBase.Milliseconds(),
		CooldownCap:  p.CooldownCap.Milliseconds(),
		ProbeTimeout: p.ProbeTimeout.Milliseconds(),
		Retention:    (p.CooldownCap + p.ProbeTimeout).Milliseconds(),
		PauseTTL:     time.Hour.Milliseconds(),
	}}
}

// localWorker is the actor of every local call: one worker, this one.
const localWorker = "local"

// localSuffix marks every reason the local breaker gives.
const localSuffix = " (local breaker: breakerd unreachable)"

// allow decides locally; the permit is marked Degraded.
func (l *localBreaker) allow(name string) *Permit {
	token := "local-" + strconv.FormatInt(l.leases.Add(1), 10)
	now := l.now()
	res := l.table.Allow(name, localWorker, token, l.params, nil, now.UnixMilli(), localSuffix)
	if d := res.GetDenial(); d != nil { // the fallback's own words
		res.Denial = fallbackDenial(d.GetDecision(), d.GetDenyUntilMs(), d.GetMayReturnAtMs())
		res.Reason = res.Denial.GetReason()
	}
	p := permitOf(name, res, now)
	p.Degraded = true
	return p
}

// record applies one outcome, fenced by the ticket's generation as
// breakerd fences it. A nil ticket is an outcome of a call breakerd
// admitted before it became unreachable: it counts against the current
// local generation.
func (l *localBreaker) record(name string, t *pb.Ticket, r Result) {
	now := l.now().UnixMilli()
	// An unrecognised error counts only under a policy that says so, and
	// the local breaker has breakerd's default policy: it does not.
	ev, err := quorum.EvidenceOf(r.Outcome, r.RetryAfter, r.Deadline, false)
	if err != nil {
		return // an undefined outcome says nothing
	}
	ticket := breaker.Ticket{Gen: t.GetGeneration(), Lease: t.GetLeaseToken()}
	if t == nil {
		ticket.Gen = l.table.Read(name, now).Gen
	}
	l.table.Apply(name, l.params, breaker.Call{Op: breaker.OpRecord, Actor: localWorker, Evidence: ev,
		Ticket: ticket, RetryAfter: min(r.RetryAfter, l.pol.CooldownCap).Milliseconds(),
		Last: breaker.Describe(r.Outcome, r.Latency, r.RetryAfter, r.Deadline, 0, oneLine(r.Message, maxMessageBytes))}, now)
}

// states returns the local view of the named breakers, as BatchGet would.
func (l *localBreaker) states(names []string) []*pb.BreakerState {
	now := l.now().UnixMilli()
	out := make([]*pb.BreakerState, len(names))
	for i, n := range names {
		out[i] = l.proto(n, l.table.Read(n, now))
	}
	return out
}

func (l *localBreaker) proto(name string, v breaker.View) *pb.BreakerState {
	st := v.Proto(name, nil)
	if st.Reason != "" {
		st.Reason += localSuffix
	}
	if d := st.GetDenial(); d != nil { // the fallback's own words
		st.Denial = fallbackDenial(d.GetDecision(), d.GetDenyUntilMs(), d.GetMayReturnAtMs())
	}
	st.SuspectDenial = nil // one worker: none is a suspect
	return st
}

// reset forgets every local verdict: breakerd answers again.
func (l *localBreaker) reset() { l.table.Reset() }
