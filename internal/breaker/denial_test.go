package breaker

import (
	"regexp"
	"strings"
	"testing"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// denialCases are views that deny, one per kind of denial and cause.
func denialCases() map[string]struct {
	v View
	q Query
} {
	const now = 1_000_000
	last := Describe(pb.Outcome_OUTCOME_SERVER_ERROR, 0, 0, 0, 503, "upstream said: s15235:payments down")
	slow := "p50=25000;limit=2000;sample=3;slow=3;calls=0"
	open := View{State: "open", Gen: 4, Fails: 6, Workers: 2, ProbeAt: now + 30_000, Cooldown: 30_000, Last: last, Now: now}
	out := map[string]struct {
		v View
		q Query
	}{}
	for _, c := range []Cause{CauseTrip, CauseWindow, CauseRateLimit, CauseProbeFailed, CauseStuckOpen, CauseFlapping, CauseOutage} {
		v := open
		v.Cause = c
		out["open "+string(c)] = struct {
			v View
			q Query
		}{v, Query{Now: now}}
	}
	v := open
	v.Cause, v.Last = CauseSlow, slow
	out["open slow"] = struct {
		v View
		q Query
	}{v, Query{Now: now}}
	add := func(name string, v View, q Query) {
		out[name] = struct {
			v View
			q Query
		}{v, q}
	}
	add("probe in flight", View{State: "half_open", Gen: 5, Cause: CauseTrip, Fails: 6, Workers: 2, Last: last, InFlight: true,
		LeaseUntil: now + 30_000, Now: now}, Query{Now: now})
	add("rate-limited probe", View{State: "half_open", Gen: 5, Cause: CauseTrip, ProbeAt: now + 5000, Now: now}, Query{Now: now})
	add("forced open", View{State: "forced_open", Gen: 6, ForceReason: "maintenance", ForceBy: "ana", Now: now}, Query{Now: now})
	for _, c := range []Cause{CauseCredential, CauseQuota} {
		add("paused "+string(c), View{State: "paused", Gen: 7, Cause: c, PauseUntil: now + 3_600_000, Now: now}, Query{Now: now})
	}
	for _, c := range []Cause{CauseSuspect, CauseWindowSuspect, CauseCredentialLone, CauseQuotaLone} {
		add("suspect "+string(c), View{State: "closed", Gen: 8, Cause: c, Fails: 6, Suspect: "w-17", SuspectUntil: now + 3000,
			Last: last, Now: now}, Query{Worker: "w-17", Now: now})
	}
	add("suspect slow", View{State: "closed", Gen: 8, Cause: CauseSlowSuspect, Suspect: "w-17", SuspectUntil: now + 3000,
		Last: slow, Now: now}, Query{Worker: "w-17", Now: now})
	add("refused probes", View{State: "half_open", Gen: 9, Cause: CauseTrip, NoProbe: "w-17", NoProbeUntil: now + 30_000,
		ProbeAt: now - 1, Now: now}, Query{Worker: "w-17", Now: now})
	add("parent", View{State: "closed", Gen: 1, Now: now}, Query{Now: now, Parent: Parent{Decision: pb.Decision_DECISION_DENIED_OPEN, Until: now + 9000}})
	return out
}

// TestDenialWordsAreForAModel: every denial the daemon words names no
// breaker, no worker, no wait and no quorum, never the worker's own
// message; a suspect's is this worker's problem, status worker_isolated;
// a probe in flight gives no return time and no invitation to ask again
// and says nothing of the failures before it.
func TestDenialWordsAreForAModel(t *testing.T) {
	const name = "s15235:payments"
	banned := regexp.MustCompile(`s15235|payments|w-17|worker w\S*\d|\d+ workers?\b|quorum|confirms|in \d+(ms|s|m|h)\b|ask again|retry|next probe|upstream said`)
	parentWords := &pb.Denial{Reason: "it is failing", Status: StatusCircuitOpen, MayReturnAtMs: 1_009_000}
	for what, c := range denialCases() {
		d := c.v.DenialOf(name, c.q, parentWords)
		if d == nil {
			t.Fatalf("%s: no denial", what)
		}
		if d.GetReason() == "" || banned.MatchString(d.GetReason()) {
			t.Errorf("%s: reason %q holds a name, a worker, a wait or quorum jargon", what, d.GetReason())
		}
		wantStatus := map[pb.Decision]string{pb.Decision_DECISION_DENIED_OPEN: StatusCircuitOpen,
			pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT: StatusProbeInFlight, pb.Decision_DECISION_DENIED_FORCED_OPEN: StatusForcedOpen,
			pb.Decision_DECISION_DENIED_PAUSED: StatusPaused, pb.Decision_DECISION_DENIED_SUSPECT_WORKER: StatusWorkerIsolated,
			pb.Decision_DECISION_DENIED_PARENT_OPEN: StatusParentOpen}[d.GetDecision()]
		if d.GetStatus() != wantStatus {
			t.Errorf("%s: status %q for %v, want %q", what, d.GetStatus(), d.GetDecision(), wantStatus)
		}
		switch d.GetDecision() {
		case pb.Decision_DECISION_DENIED_SUSPECT_WORKER:
			if d.GetScope() != pb.DenialScope_DENIAL_SCOPE_WORKER || !strings.Contains(d.GetReason(), "this worker") ||
				strings.Contains(d.GetReason(), "circuit") || d.GetMayReturnAtMs() != d.GetDenyUntilMs() || d.GetMayReturnAtMs() <= c.q.Now {
				t.Errorf("%s: %v, want this worker's own denial until its end", what, d)
			}
		case pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT:
			if d.GetMayReturnAtMs() != 0 || d.GetDenyUntilMs() != c.v.LeaseUntil || strings.Contains(d.GetReason(), "fail") &&
				!strings.HasPrefix(d.GetReason(), "it failed and is being tested") {
				t.Errorf("%s: %v, want no return time, denied for the lease, the probe's words only", what, d)
			}
		case pb.Decision_DECISION_DENIED_FORCED_OPEN:
			if !d.GetForced() || d.GetReason() != "forced open by an operator: maintenance" || d.GetDenyUntilMs() != Forever {
				t.Errorf("%s: %v", what, d)
			}
		case pb.Decision_DECISION_DENIED_PARENT_OPEN:
			if d.GetScope() != pb.DenialScope_DENIAL_SCOPE_PARENT || d.GetReason() != parentWords.GetReason() ||
				d.GetMayReturnAtMs() != parentWords.GetMayReturnAtMs() {
				t.Errorf("%s: %v, want the parent's words and return", what, d)
			}
		}
	}
}

// TestDenialWordsRenderedOncePerGeneration: the words of a breaker's
// denial are rendered once for its generation, however many answers
// carry them, and again for the next generation.
func TestDenialWordsRenderedOncePerGeneration(t *testing.T) {
	v := View{State: "open", Gen: 41, Fails: 5, Cause: CauseTrip, ProbeAt: 2000, Last: "timeout", Now: 1000}
	before := voice.renders()
	var first string
	for i := range 100 {
		d := v.DenialOf("once-per-gen", Query{Now: 1000 + int64(i)}, nil)
		if i == 0 {
			first = d.GetReason()
		}
		if d.GetReason() != first {
			t.Fatalf("answer %d: %q, want the same words %q", i, d.GetReason(), first)
		}
	}
	if n := voice.renders() - before; n != 1 {
		t.Fatalf("100 answers on one generation rendered the words %d times, want 1", n)
	}
	v.Gen, v.Fails = 42, 7
	if d := v.DenialOf("once-per-gen", Query{Now: 1000}, nil); !strings.Contains(d.GetReason(), "7 failed calls") || voice.renders()-before != 2 {
		t.Errorf("the next generation: %q after %d renders, want its own words, rendered once more", d.GetReason(), voice.renders()-before)
	}
}

// TestWordCacheIsBounded: past its bound the cache starts over rather
// than grow.
func TestWordCacheIsBounded(t *testing.T) {
	c := wordCache{max: 8}
	for g := range int64(100) {
		c.words("b", View{State: "open", Gen: g, Cause: CauseTrip}, Verdict{Decision: pb.Decision_DECISION_DENIED_OPEN, Cause: CauseTrip})
		c.mu.Lock()
		n := len(c.m)
		c.mu.Unlock()
		if n > 8 {
			t.Fatalf("the cache holds %d words, past its bound 8", n)
		}
	}
}

// TestMemoryAllowCarriesTheDenial: an Allow answered from memory (the
// daemon's outage memory) carries the denial and its words, the answer's
// reason saying where it comes from and the denial's words not.
func TestMemoryAllowCarriesTheDenial(t *testing.T) {
	tb := NewTable()
	tb.Seed("search", State{Phase: Open, Gen: 3, ProbeAt: 5000, Cooldown: 4000, Cause: CauseTrip, Workers: []string{"w1", "w2"},
		Fails: 5, Last: "timeout after 30s"}, 0, params.Retention)
	const suffix = " (from memory)"
	out := tb.Allow("search", "w1", "t1", params, []string{"cached_search"}, 1000, suffix)
	d := out.GetDenial()
	if out.GetDecision() != pb.Decision_DECISION_DENIED_OPEN || d.GetStatus() != StatusCircuitOpen ||
		d.GetReason() != "it is failing: 5 failed calls in a row, last: timeout after 30s" || out.GetReason() != d.GetReason()+suffix ||
		d.GetDenyUntilMs() != 5000 || d.GetMayReturnAtMs() != 5000 || out.GetState().GetDenial().GetReason() != d.GetReason() {
		t.Errorf("Allow from memory = %v, reason %q, denial %v; want circuit_open until 5000, words without the suffix",
			out.GetDecision(), out.GetReason(), d)
	}
}
