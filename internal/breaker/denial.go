package breaker

import (
	"fmt"
	"sync"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The denial a caller receives (pb.Denial): which one, by the read rule
// (View.Verdict), and in which words, for the model behind the caller.
// The words name no breaker, no worker and no wait (the templates in
// conformance/ render the wait from may_return_at_ms when the answer is
// given), hold no quorum jargon, and say the current state's reason only.
// StateReason and EventReason stay the operators' words.

// The status words of a denial (pb.Denial.status).
const (
	StatusCircuitOpen     = "circuit_open"
	StatusProbeInFlight   = "probe_in_flight"
	StatusForcedOpen      = "forced_open"
	StatusPaused          = "paused"
	StatusWorkerIsolated  = "worker_isolated"
	StatusParentOpen      = "parent_open"
	forcedWords           = "forced open by an operator"
	probeInFlightWords    = "it failed and is being tested with a single call; its recovery is not confirmed yet"
	parentUnknownWords    = "it is out of service"
	workerElsewhereSuffix = "; it stays up for the rest of the fleet"
)

// DenialOf is the denial for the asking worker (q.Worker, "" for any
// worker but the suspect) that v implies for the next Allow at q.Now
// under q.Parent, whose own denial (the parent's fleet denial; nil when
// unknown) gives a parent's denial its words; nil when that Allow would
// not deny, or would move the breaker (Verdict.Due: only the store
// decides it). name keys the words' cache.
func (v View) DenialOf(name string, q Query, parent *pb.Denial) *pb.Denial {
	return denialOf(name, v, v.Verdict(q), parent)
}

// denialOf is DenialOf of the verdict vd on v.
func denialOf(name string, v View, vd Verdict, parent *pb.Denial) *pb.Denial {
	if !vd.Holds() {
		return nil
	}
	return NewDenial(name, v, vd, parent)
}

// NewDenial is the denial of the denying verdict vd on v (see DenialOf).
func NewDenial(name string, v View, vd Verdict, parent *pb.Denial) *pb.Denial {
	if vd.Decision == pb.Decision_DECISION_DENIED_PARENT_OPEN {
		return ParentDenial(vd.Until, parent)
	}
	status, reason := voice.words(name, v, vd)
	d := &pb.Denial{Decision: vd.Decision, Scope: pb.DenialScope_DENIAL_SCOPE_BREAKER,
		Forced: vd.Decision == pb.Decision_DECISION_DENIED_FORCED_OPEN, DenyUntilMs: orForever(vd.Until),
		Reason: reason, Status: status}
	if vd.Decision == pb.Decision_DECISION_DENIED_SUSPECT_WORKER {
		d.Scope = pb.DenialScope_DENIAL_SCOPE_WORKER
	}
	if vd.Decision != pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT && vd.Until != Forever {
		d.MayReturnAtMs = vd.Until // a lease is no wait
	}
	return d
}

// WithDenial fills out, an Allow's answer for worker on v (the view
// after it) under parent, from its denial: AllowResponse.denial, and the
// reason kept for older clients (a shadow denial's reason says what
// enforced mode would have said), and makes its state's denial this
// worker's. retry_after_ms stays how long the denial holds (a probe's
// lease included): a protocol time, never words for a model.
func WithDenial(out *pb.AllowResponse, name, worker string, v View, parent Parent) {
	if out.Denial = AllowDenial(name, worker, out.GetDecision(), out.GetRetryAfterMs(), v, parent); out.Denial != nil {
		out.Reason = out.Denial.GetReason()
	}
	if ShadowDenied(out.GetShadowDecision()) {
		would := AllowDenial(name, worker, out.GetShadowDecision(), out.GetRetryAfterMs(), v, parent)
		out.Reason = ShadowPrefix + "would have been denied: " + would.GetReason()
	}
	if st := out.GetState(); st != nil {
		st.Denial = v.DenialOf(name, Query{Worker: worker, Now: v.Now, Parent: parent, PolicyShadow: st.GetShadow()}, parent.Denial)
		st.SuspectDenial = nil
	}
}

// AllowDenial is the denial of an Allow by worker that answered d (a
// DENIED_* decision, else nil is returned) with retryAfter (ms), v being
// the breaker's view after it and parent the parent's verdict it was
// judged under. The read rule gives the denial's end and cause; should
// it disagree with the script's answer, the answer wins, until now plus
// retryAfter (forever when 0).
func AllowDenial(name, worker string, d pb.Decision, retryAfter int64, v View, parent Parent) *pb.Denial {
	if !(Verdict{Decision: d}).Denied() {
		return nil
	}
	vd := v.lapsed(v.Now).enforced(Query{Worker: worker, Now: v.Now, Parent: parent})
	if vd.Decision != d {
		vd = Verdict{Decision: d, Until: Forever, Cause: v.Cause}
		if retryAfter > 0 {
			vd.Until = v.Now + retryAfter
		}
	}
	return NewDenial(name, v, vd, parent.Denial)
}

// ParentDenial is a child's denial by its parent until until (ms since
// the epoch; 0 or Forever when only an operator ends it): the parent's
// own denial's words, forced flag and return time, scope PARENT.
func ParentDenial(until int64, parent *pb.Denial) *pb.Denial {
	d := &pb.Denial{Decision: pb.Decision_DECISION_DENIED_PARENT_OPEN, Scope: pb.DenialScope_DENIAL_SCOPE_PARENT,
		DenyUntilMs: orForever(until), Reason: parentUnknownWords, Status: StatusParentOpen}
	if parent != nil {
		d.Forced, d.Reason, d.MayReturnAtMs = parent.GetForced(), parent.GetReason(), parent.GetMayReturnAtMs()
	}
	return d
}

// Words is the status word and the model's words of the denying verdict
// vd on v, as a Denial holds them.
func Words(v View, vd Verdict) (status, reason string) {
	switch vd.Decision {
	case pb.Decision_DECISION_DENIED_FORCED_OPEN:
		if v.ForceReason == "" {
			return StatusForcedOpen, forcedWords
		}
		return StatusForcedOpen, forcedWords + ": " + v.ForceReason
	case pb.Decision_DECISION_DENIED_PAUSED:
		return StatusPaused, "paused: " + needsPerson(vd.Cause)
	case pb.Decision_DECISION_DENIED_SUSPECT_WORKER:
		return StatusWorkerIsolated, workerWords(vd.Cause, v.Last)
	case pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT:
		return StatusProbeInFlight, probeInFlightWords
	case pb.Decision_DECISION_DENIED_PARENT_OPEN:
		return StatusParentOpen, parentUnknownWords
	}
	if v.State == string(HalfOpen) {
		return StatusCircuitOpen, "it rate limited the test call made after an outage and asked for a wait before the next one"
	}
	return StatusCircuitOpen, openWords(vd.Cause, Spoken(v.Last), v.Fails)
}

// openWords says why an open breaker denies.
func openWords(c Cause, last string, fails int64) string {
	if last != "" && c != CauseSlow {
		last = ", last: " + last
	}
	switch c {
	case CauseTrip:
		return fmt.Sprintf("it is failing: %s in a row%s", plural(fails, "failed call"), last)
	case CauseWindow:
		return "it is failing: too many of its recent calls failed" + last
	case CauseSlow:
		return "it is too slow: " + slowCount(last) + " took longer than " + Human(ms(slowLimit(last))) + " (" + SlowPhrase(last) + ")"
	case CauseRateLimit:
		return "it is rate limiting its callers for longer than they can wait" + last
	case CauseProbeFailed:
		return "it is still failing: the test call made after the outage failed" + last
	case CauseStuckOpen:
		return "it is down: it kept failing through repeated test calls" + last
	case CauseFlapping:
		return "it keeps failing again soon after recovering" + last
	case CauseCredential, CauseQuota:
		return needsPerson(c)
	}
	return "it is failing" // CauseOutage's Last is an operator's line: not for a model
}

// needsPerson says why a pause (or a credential or quota trip) waits
// for a person.
func needsPerson(c Cause) string {
	switch c {
	case CauseCredential:
		return "the service rejected the credential it is called with (HTTP 401 after it had worked); a person must check it"
	case CauseQuota:
		return "the account's quota or billing for the service is exhausted; a person must top it up or raise the limit"
	}
	return "a person must act before it is used again"
}

// workerWords says why a suspect worker alone is denied: its own
// problem, never the fleet's.
func workerWords(c Cause, last string) string {
	switch c {
	case CauseProbeAbandoned:
		return "this worker was given test calls of the service after an outage and did not report them; " +
			"other workers test it for now" + workerElsewhereSuffix
	case CauseSlowSuspect:
		return "only this worker's calls to it are slow (" + slowCount(last) + " took longer than " + Human(ms(slowLimit(last))) +
			": " + SlowPhrase(last) + "), and no other worker sees it: likely this worker's network or load" + workerElsewhereSuffix
	case CauseCredentialLone:
		return "the service refused this worker's credential (HTTP 401) after it had worked, and no other worker sees it: " +
			"likely this worker's configuration" + workerElsewhereSuffix
	case CauseQuotaLone:
		return "the service told this worker its quota is exhausted (HTTP 402), and no other worker sees it: " +
			"likely this worker's account or configuration" + workerElsewhereSuffix
	}
	return "only this worker's calls to it have failed, and no other worker sees it: " +
		"likely this worker's network or configuration" + workerElsewhereSuffix
}

// voice is the daemon's cache of denial words: rendered once per
// breaker generation and what the words are made of, never per call.
var voice = wordCache{max: 1 << 14}

// wordKey is what a denial's words depend on.
type wordKey struct {
	name, state  string
	gen, fails   int64
	decision     pb.Decision
	cause        Cause
	last, forced string
}

// wordCache holds at most max words; when full it starts over.
type wordCache struct {
	mu  sync.Mutex
	max int
	m   map[wordKey][2]string
	// rendered counts the words rendered (not found in the cache).
	rendered int
}

func (c *wordCache) words(name string, v View, vd Verdict) (status, reason string) {
	k := wordKey{name: name, state: v.State, gen: v.Gen, decision: vd.Decision, cause: vd.Cause, forced: v.ForceReason}
	if vd.Decision == pb.Decision_DECISION_DENIED_OPEN || vd.Cause == CauseSlowSuspect {
		// A suspect's failures go on within a generation; the words
		// that count them are an open breaker's, whose run has ended.
		k.fails, k.last = v.Fails, v.Last
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if w, ok := c.m[k]; ok {
		return w[0], w[1]
	}
	if c.m == nil || len(c.m) >= c.max {
		c.m = make(map[wordKey][2]string)
	}
	status, reason = Words(v, vd)
	c.m[k] = [2]string{status, reason}
	c.rendered++
	return status, reason
}

// renders is how many words the cache rendered so far, for tests.
func (c *wordCache) renders() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rendered
}
