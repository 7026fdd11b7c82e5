package breaker

import (
	"fmt"
	"strings"
	"time"

	"github.com/breakerd/breakerd/internal/probe"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// This file holds every sentence breakerd says about a breaker. The
// scripts store causes and numbers; these functions turn them into the
// words a denied caller (and the model behind it) reads, once, in Go.

// StateReason says why the breaker is in its state: why it is open or
// paused, or the operator's reason for a pin; "" when closed.
func StateReason(name string, v View) string {
	switch v.State {
	case "forced_open", "forced_closed":
		return v.ForceReason
	case "closed":
		return ""
	}
	r := causeReason(name, v.Cause, v.Fails, v.Workers, v.RL, v.Cooldown, v.Last, "")
	if v.State == "paused" && v.PauseUntil > v.Now {
		r += "; it resumes by itself in " + Human(ms(v.PauseUntil-v.Now)) + " unless an operator resumes it first"
	}
	return r
}

// causeReason renders a cause with the numbers that go with it.
func causeReason(name string, c Cause, fails, workers, rl, cooldown int64, last, actor string) string {
	last = Spoken(last) // the worker's message is for operators, never in a reason
	switch c {
	case CauseTrip:
		return fmt.Sprintf("%s failing: %s from %s, last: %s", name, plural(fails, "consecutive failure"), plural(workers, "worker"), last)
	case CauseWindow:
		return fmt.Sprintf("%s failing: %d failures from %s within the failure-rate window, at or above the policy's failure_rate, last: %s",
			name, fails, plural(workers, "worker"), last)
	case CauseWindowSuspect:
		return fmt.Sprintf("%s: %d failures within the failure-rate window, all from worker %s, and no other worker confirms: "+
			"likely %s's network or config; it alone is denied while the circuit stays closed, last: %s",
			name, fails, actor, actor, last)
	case CauseSlow:
		m, _ := parseSlowMeasure(last)
		if m.calls > 0 {
			return fmt.Sprintf("%s slow: %d of %d calls within the window took longer than %s (at or above the policy's slow_call_rate), from %s: %s",
				name, m.slow, m.calls, Human(ms(m.limit)), plural(workers, "worker"), SlowPhrase(last))
		}
		return fmt.Sprintf("%s slow: %d consecutive calls took longer than %s, from %s: %s",
			name, m.slow, Human(ms(m.limit)), plural(workers, "worker"), SlowPhrase(last))
	case CauseSlowSuspect:
		return fmt.Sprintf("%s: %s slower than %s, all from worker %s, and no other worker confirms: "+
			"likely %s's network or load; it alone is denied while the circuit stays closed (%s)",
			name, slowCount(last), Human(ms(slowLimit(last))), actor, actor, SlowPhrase(last))
	case CauseRateLimit:
		return fmt.Sprintf("%s rate limited: %d consecutive 429s with a Retry-After beyond the caller's deadline, last: %s", name, rl, last)
	case CauseProbeFailed:
		return fmt.Sprintf("%s still failing: the probe failed (%s); next probe in %s", name, last, Human(ms(cooldown)))
	case CauseCredential:
		return name + ": credential rejected by several workers; needs a human (a 401 after the credential had worked: " +
			"likely revoked or rotated; an operator resumes it with Force AUTO)"
	case CauseCredentialLone:
		return fmt.Sprintf("%s rejected worker %s's credential (401) after it had worked, and no other worker confirms: "+
			"that worker alone is isolated; the breaker stays up for the fleet", name, actor)
	case CauseQuota:
		return name + ": the account's quota or billing is exhausted (HTTP 402 or insufficient_quota), seen by several " +
			"workers; needs a human (top it up or raise the limit; an operator resumes it with Force AUTO)"
	case CauseQuotaAlert:
		return name + ": the account's quota or billing is exhausted (HTTP 402 or insufficient_quota): a human must act; not a trip"
	case CauseQuotaLone:
		return fmt.Sprintf("%s told worker %s its quota is exhausted (HTTP 402), and no other worker confirms: "+
			"that worker alone is isolated; the breaker stays up for the fleet", name, actor)
	case CausePauseExpiring:
		return name + ": the pause lapses soon and calls will go out again; resume or re-force it now if the credential is still bad"
	case CausePauseExpired:
		return "pause expired"
	case CauseOutage:
		return last
	case CauseProbeAbandoned:
		return fmt.Sprintf("%s: worker %s let %d probe leases in a row lapse without reporting; it is refused probes for one cooldown",
			name, actor, MaxLapses)
	case CauseCredentialAlert:
		return name + " rejected its credential (401): a human must check it; not a trip"
	case CauseCooldownElapsed:
		return "cooldown elapsed; one probe admitted"
	case CauseProbeSucceeded:
		return "probe succeeded"
	case CauseRecoveryCheck:
		return fmt.Sprintf("%s: its recovery check succeeded before the cooldown ended; one probe admitted", name)
	case CauseForceExpired:
		return "forced state expired"
	case CauseFlapping:
		return fmt.Sprintf("%s flapping: it tripped again soon after a probe closed it, so its cooldown grows to %s "+
			"instead of starting over at the base; it starts over once the breaker stays closed for %d open periods",
			name, Human(ms(cooldown)), probe.BackoffKept)
	case CauseStuckOpen:
		return fmt.Sprintf("%s still open after 2 cooldown cycles (2 failed probes since the trip, last: %s): "+
			"the dependency is down; the breaker is reporting the outage, not causing it", name, last)
	case CauseSuspect:
		return fmt.Sprintf("%s: %d consecutive failures, all from worker %s, and no other worker confirms: "+
			"likely %s's network or config; it alone is denied while the circuit stays closed, last: %s",
			name, fails, actor, actor, last)
	case "":
		return ""
	}
	return name + ": " + string(c)
}

// EventReason says what an event means in plain words.
func EventReason(name string, e Event) string {
	r := eventReason(name, e)
	if e.Shadow && e.Cause != CauseShadow {
		return ShadowEventWords(e.Kind, e.From, e.To) + r
	}
	return r
}

// ShadowEventWords starts the reason of an event a shadowed breaker
// emitted: what enforced mode would have done ("shadow mode, not
// enforced: would have opened: ").
func ShadowEventWords(kind, from, to string) string {
	if kind == "transition" && from != to {
		verb := map[string]string{"open": "opened", "half_open": "half-opened", "closed": "closed", "paused": "paused"}[to]
		if verb == "" {
			verb = "gone " + to
		}
		return ShadowPrefix + "would have " + verb + ": "
	}
	if to == "paused" && from != to {
		return ShadowPrefix + "would have paused: "
	}
	return ShadowPrefix
}

func eventReason(name string, e Event) string {
	switch e.Cause {
	case CauseShadow:
		r := "shadow setting changed: the breaker is now enforced"
		if e.Shadow {
			r = "shadow setting changed: the breaker is now shadowed (Allow always allows; transitions are recorded, not enforced)"
		}
		if e.Note != "" {
			r += ": " + e.Note
		}
		return r
	case CauseForced, CauseStateLost:
		return e.Note
	case CauseOpenFractionCap:
		return CapReason(name, e.Note)
	case CauseAuto:
		if e.Note == "" {
			return "returned to automatic operation"
		}
		return "returned to automatic operation: " + e.Note
	}
	return causeReason(name, e.Cause, e.Fails, e.Workers, e.RL, e.Cooldown, e.Last, e.Actor)
}

// String renders a Record's note in plain words.
func (n Note) String() string { return noteWords[n] }

// noteWords are the notes' plain words (Note.String).
var noteWords = map[Note]string{
	NotePaused:           "paused: credential rejected; outcomes are not counted until an operator resumes it",
	NoteCredentialPaused: "credential rejected: breaker paused until an operator resumes it",
	NoteOpen:             "circuit open: outcome from before the trip",
	NoteOpenExtended:     "circuit open: Retry-After moved the next probe later",
	NoteForcedOpen:       "forced open: outcomes are not counted",
	NoteNotLeaseHolder:   "not the probe lease holder",
	NoteProbeReleased:    "outcome never counts: probe lease released, still half-open",
	NoteProbeThrottled:   "probe rate limited within its deadline: no verdict; lease released, next probe after the Retry-After",
	NoteStale:            "ticket from another generation: the breaker moved on since the Allow, or its state was lost or reset",
	NoteThrottled:        "rate limited within the deadline: not counted",
	NoteNeutral:          "outcome never counts",
	NoteCredentialLone:   "credential rejected for this worker only: it is isolated until another worker confirms",
	NoteQuotaPaused:      "quota exhausted: breaker paused until an operator resumes it or the pause lapses",
	NoteQuotaLone:        "quota exhausted for this worker only: it is isolated until another worker confirms",
	NoteRecovered:        "recovery check succeeded: half-open, the next call is the probe",
	NoteRecoveryStale:    "recovery check succeeded, but the breaker is no longer open at the generation it was started at: nothing changed",
	NoteCapped:           "counted; the trip it made was stopped by the group's open-fraction cap: the breaker stays closed",
	NoteShadowDenied:     "shadow mode: enforced mode would have denied this call, so its outcome is not counted",
}

// Describe renders a counted failure in the daemon's own words, from the
// outcome, the numbers and, when the daemon holds one, the HTTP status
// (from a Record's evidence): "timeout after 30s", "server error (HTTP
// 503)". The worker's message (RecordRequest.message) is kept after
// MessageSep, for operators: Spoken and Message take the two apart, and
// nothing a model reads is built from the message.
func Describe(o pb.Outcome, latency, retryAfter, deadline time.Duration, httpStatus int32, message string) string {
	var d string
	switch o {
	case pb.Outcome_OUTCOME_TIMEOUT:
		d = "timeout"
		if latency > 0 {
			d += " after " + Human(latency)
		}
	case pb.Outcome_OUTCOME_TRANSPORT:
		d = "transport error"
	case pb.Outcome_OUTCOME_SERVER_ERROR:
		d = "server error (5xx)"
		if httpStatus >= 500 && httpStatus <= 599 {
			d = fmt.Sprintf("server error (HTTP %d)", httpStatus)
		}
	case pb.Outcome_OUTCOME_MALFORMED_OUTPUT:
		d = "malformed output"
	case pb.Outcome_OUTCOME_RATE_LIMITED:
		d = fmt.Sprintf("rate limited (429), Retry-After %s beyond a %s deadline", Human(retryAfter), Human(deadline))
	default:
		d = o.String()
	}
	if message != "" {
		d += MessageSep + message
	}
	return d
}

// MessageSep separates, in a stored last failure, the daemon's own words
// from the worker's message. A message never holds it: the daemon turns
// control characters into spaces before it is stored.
const MessageSep = "\x1f"

// Spoken is the daemon's own words of a stored last failure (Describe):
// the only part any text a model reads is built from.
func Spoken(last string) string {
	s, _, _ := strings.Cut(last, MessageSep)
	return s
}

// Message is the worker's message kept with a stored last failure, for
// operators only; "" when none.
func Message(last string) string {
	_, m, _ := strings.Cut(last, MessageSep)
	return m
}

// SlowPhrase renders a SlowMeasure as the observed latency: "p50 25s
// over the last 12 calls, limit 2s". Anything else is returned as it is.
func SlowPhrase(last string) string {
	m, ok := parseSlowMeasure(last)
	if !ok {
		return last
	}
	return fmt.Sprintf("p50 %s over the last %s, limit %s", Human(ms(m.p50)), plural(m.sample, "call"), Human(ms(m.limit)))
}

// slowCount says how many slow calls a SlowMeasure counted: "12
// consecutive calls" or "7 of 10 calls within the window".
func slowCount(last string) string {
	m, _ := parseSlowMeasure(last)
	if m.calls > 0 {
		return fmt.Sprintf("%d of %d calls within the window", m.slow, m.calls)
	}
	return fmt.Sprintf("%d consecutive calls", m.slow)
}

func slowLimit(last string) int64 { m, _ := parseSlowMeasure(last); return m.limit }

// plural says "1 worker", "2 workers".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// Human renders a duration the way people say it, rounded to what a
// reader needs: 250ms, 1.5s, 45s, 2m, 2m30s, 1h5m.
func Human(d time.Duration) string {
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

// CapReason says what an open_fraction_cap event means, from its note
// (CapNote: "<cause>:<open>:<members>").
func CapReason(name, note string) string {
	parts := strings.SplitN(note, ":", 3)
	if len(parts) != 3 {
		return name + ": a trip was stopped by its group's open-fraction cap: the breaker stays closed (recorded, not enforced)"
	}
	on, ok := capTrips[Cause(parts[0])]
	if !ok {
		on = "(" + parts[0] + ")"
	}
	return fmt.Sprintf("%s: a trip %s was stopped by its group's open-fraction cap: %s of the group's %s members "+
		"would have been open, more than its max_open_fraction; the breaker stays closed (recorded, not enforced). "+
		"Many breakers tripping at once often means a fault on the callers' side", name, on, parts[1], parts[2])
}

// capTrips names, for CapReason, what each kind of trip the cap can stop
// was on.
var capTrips = map[Cause]string{
	CauseTrip:      "on consecutive failures",
	CauseRateLimit: "on rate limits",
	CauseWindow:    "on the window's failure rate",
	CauseSlow:      "on slow calls",
}
