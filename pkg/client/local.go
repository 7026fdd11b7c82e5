package client

import (
	"fmt"
	"strings"
	"sync"
	"time"

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

// localBreaker is the in-process fallback: breakerd's state machine
// (closed, open, half-open with one probe, generations fencing late
// reports) for the breakers this worker calls. It is safe for concurrent
// use.
type localBreaker struct {
	pol LocalPolicy
	now func() time.Time

	mu sync.Mutex
	m  map[string]*localState
}

type localState struct {
	st         pb.State // CLOSED, OPEN or HALF_OPEN
	gen        int64
	fails, rl  int
	level      int // failed probes since it opened
	openedAt   time.Time
	probeAt    time.Time
	cooldown   time.Duration
	leaseUntil time.Time // a live local probe when after now
	reason     string
	last       string
}

// localLease marks the ticket of a local probe.
const localLease = "local"

func newLocalBreaker(p LocalPolicy, now func() time.Time) *localBreaker {
	return &localBreaker{pol: p.withDefaults(), now: now, m: map[string]*localState{}}
}

func (l *localBreaker) get(name string) *localState {
	s := l.m[name]
	if s == nil {
		s = &localState{st: pb.State_STATE_CLOSED}
		l.m[name] = s
	}
	return s
}

// allow decides locally; the permit is marked Degraded.
func (l *localBreaker) allow(name string) *Permit {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	s := l.get(name)
	p := &Permit{Breaker: name, Degraded: true, Decision: pb.Decision_DECISION_ALLOWED}
	switch {
	case s.st == pb.State_STATE_OPEN && now.Before(s.probeAt):
		p.Decision, p.RetryAfter, p.Reason = pb.Decision_DECISION_DENIED_OPEN, s.probeAt.Sub(now), s.reason
	case s.st == pb.State_STATE_HALF_OPEN && now.Before(s.leaseUntil):
		p.Decision, p.RetryAfter = pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT, s.leaseUntil.Sub(now)
		p.Reason = name + " is being probed by another call on this worker; ask again after the probe"
	case s.st != pb.State_STATE_CLOSED: // open past its cooldown, or half-open with no live probe
		if s.st == pb.State_STATE_OPEN {
			s.st = pb.State_STATE_HALF_OPEN
			s.gen++
		}
		s.leaseUntil = now.Add(l.pol.ProbeTimeout)
		p.Decision = pb.Decision_DECISION_PROBE
	}
	p.Ticket = &pb.Ticket{Generation: s.gen}
	if p.Decision == pb.Decision_DECISION_PROBE {
		p.Ticket.LeaseToken = localLease
	}
	p.State = l.snapshot(name, s, now)
	return p
}

// record applies one outcome, fenced by the ticket's generation as
// breakerd fences it. A nil ticket is an outcome of a call breakerd
// admitted before it became unreachable: it counts against the current
// local generation.
func (l *localBreaker) record(name string, t *pb.Ticket, r Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	s := l.get(name)
	gen := s.gen
	if t != nil {
		gen = t.GetGeneration()
	}
	counted, success := evidence(r)
	switch s.st {
	case pb.State_STATE_OPEN:
		return
	case pb.State_STATE_HALF_OPEN:
		if t.GetLeaseToken() != localLease || gen != s.gen {
			return
		}
		switch {
		case success:
			*s = localState{st: pb.State_STATE_CLOSED, gen: s.gen + 1}
		case counted:
			s.last = describe(r)
			cd := l.cooldown(s.level + 1)
			if r.Outcome == pb.Outcome_OUTCOME_RATE_LIMITED {
				cd = max(cd, r.RetryAfter)
			}
			l.open(s, s.level+1, cd, now, fmt.Sprintf("%s still failing: the probe failed (%s); next probe in %s", name, s.last, human(cd)))
		default:
			s.leaseUntil = time.Time{}
		}
		return
	}
	if gen != s.gen {
		return
	}
	switch {
	case success:
		s.fails, s.rl, s.last = 0, 0, ""
	case r.Outcome == pb.Outcome_OUTCOME_RATE_LIMITED && !counted:
		s.rl = 0
	case counted:
		s.fails++
		s.last = describe(r)
		if r.Outcome == pb.Outcome_OUTCOME_RATE_LIMITED {
			s.rl++
		} else {
			s.rl = 0
		}
		switch {
		case s.rl >= l.pol.RateLimitTrips:
			l.open(s, 0, r.RetryAfter, now, fmt.Sprintf("%s rate limited: %d consecutive 429s with a Retry-After beyond the caller's deadline on this worker, last: %s", name, s.rl, s.last))
		case s.fails >= l.pol.Threshold:
			l.open(s, 0, l.cooldown(0), now, fmt.Sprintf("%s unreachable: %d consecutive failures on this worker, last: %s", name, s.fails, s.last))
		}
	}
}

func (l *localBreaker) open(s *localState, level int, cd time.Duration, now time.Time, reason string) {
	if s.st == pb.State_STATE_CLOSED {
		s.openedAt = now
	}
	s.st, s.level, s.cooldown, s.probeAt = pb.State_STATE_OPEN, level, cd, now.Add(cd)
	s.gen++
	s.fails, s.rl, s.leaseUntil = 0, 0, time.Time{}
	s.reason = reason + " (local breaker: breakerd unreachable)"
}

func (l *localBreaker) cooldown(level int) time.Duration {
	cd := l.pol.CooldownBase
	for range level {
		if cd >= l.pol.CooldownCap/2 {
			return l.pol.CooldownCap
		}
		cd *= 2
	}
	return min(cd, l.pol.CooldownCap)
}

// states returns the local view of the named breakers, as BatchGet would.
func (l *localBreaker) states(names []string) []*pb.BreakerState {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	out := make([]*pb.BreakerState, len(names))
	for i, n := range names {
		s := l.m[n]
		if s == nil {
			s = &localState{st: pb.State_STATE_CLOSED}
		}
		out[i] = l.snapshot(n, s, now)
	}
	return out
}

func (l *localBreaker) snapshot(name string, s *localState, now time.Time) *pb.BreakerState {
	st := &pb.BreakerState{Breaker: name, State: s.st, Generation: s.gen, Failures: int64(s.fails),
		Reason: s.reason, LastFailure: s.last, FailedProbes: int64(s.level), AsOfMs: now.UnixMilli(),
		ProbeInFlight: s.st == pb.State_STATE_HALF_OPEN && now.Before(s.leaseUntil)}
	if s.fails > 0 {
		st.DistinctWorkers = 1
	}
	if s.st != pb.State_STATE_CLOSED {
		st.OpenedAtMs, st.CooldownMs = s.openedAt.UnixMilli(), s.cooldown.Milliseconds()
	}
	if s.st == pb.State_STATE_OPEN {
		st.NextProbeAtMs = s.probeAt.UnixMilli()
	}
	return st
}

// reset forgets every local verdict: breakerd answers again.
func (l *localBreaker) reset() {
	l.mu.Lock()
	l.m = map[string]*localState{}
	l.mu.Unlock()
}

// evidence reads an outcome as breakerd's record script does: counted
// failures are transport, timeout, 5xx, malformed output and a 429 whose
// Retry-After exceeds the deadline.
func evidence(r Result) (counted, success bool) {
	switch r.Outcome {
	case pb.Outcome_OUTCOME_SUCCESS:
		return false, true
	case pb.Outcome_OUTCOME_TRANSPORT, pb.Outcome_OUTCOME_TIMEOUT,
		pb.Outcome_OUTCOME_SERVER_ERROR, pb.Outcome_OUTCOME_MALFORMED_OUTPUT:
		return true, false
	case pb.Outcome_OUTCOME_RATE_LIMITED:
		return r.RetryAfter > r.Deadline, false
	}
	return false, false
}

// describe says what failed in plain words, as breakerd's reasons do.
func describe(r Result) string {
	var d string
	switch r.Outcome {
	case pb.Outcome_OUTCOME_TIMEOUT:
		d = "timeout"
		if r.Latency > 0 {
			d += " after " + human(r.Latency)
		}
	case pb.Outcome_OUTCOME_TRANSPORT:
		d = "transport error"
	case pb.Outcome_OUTCOME_SERVER_ERROR:
		d = "server error (5xx)"
	case pb.Outcome_OUTCOME_MALFORMED_OUTPUT:
		d = "malformed output"
	case pb.Outcome_OUTCOME_RATE_LIMITED:
		d = fmt.Sprintf("rate limited (429), Retry-After %s beyond a %s deadline", human(r.RetryAfter), human(r.Deadline))
	default:
		d = r.Outcome.String()
	}
	if r.Message != "" {
		d += ": " + r.Message
	}
	return d
}

// human renders a duration the way people say it, rounded to what a
// reader needs: 250ms, 1.5s, 45s, 2m, 2m30s, 1h5m.
func human(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	case d < 10*time.Second && d%time.Second != 0:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	if d = d.Round(time.Second); d >= time.Hour {
		d = d.Round(time.Minute)
	}
	h, m, sec := d/time.Hour, d%time.Hour/time.Minute, d%time.Minute/time.Second
	var b strings.Builder
	for _, part := range []struct {
		n    time.Duration
		unit string
	}{{h, "h"}, {m, "m"}, {sec, "s"}} {
		if part.n > 0 {
			fmt.Fprintf(&b, "%d%s", part.n, part.unit)
		}
	}
	return b.String()
}
