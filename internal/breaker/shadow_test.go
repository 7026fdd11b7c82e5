package breaker

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/breakerd/breakerd/internal/quorum"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestShadowRunsTheEnforcedMachine: the same traffic on a shadowed
// breaker and on an enforced one, where the enforced fleet makes only the
// calls it is allowed (a denied call sends no Record) and the shadowed
// fleet makes every call. After every step both hold the same state,
// every shadow decision is the enforced decision, every shadow Allow is
// ALLOWED, and every event of the shadowed breaker is marked shadow. So
// a shadow-denied call's Record changes nothing, and the others count as
// they would enforced.
func TestShadowRunsTheEnforcedMachine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := params
		p.Rule.MinWorkers = int64(rapid.IntRange(1, 2).Draw(t, "min_workers"))
		p.SlowCallMs, p.SlowCallThreshold = 2000, 2
		sp := p
		sp.Shadow = true
		var enf, sh State
		enfTicket, shTicket := map[string]*Ticket{}, map[string]*Ticket{}
		now := int64(1_000_000)
		evidences := []quorum.Evidence{quorum.Healthy, quorum.Failure, quorum.Failure, quorum.RateLimited,
			quorum.Throttled, quorum.Neutral, quorum.CredentialRejected, quorum.QuotaExhausted}
		for i := range rapid.IntRange(1, 80).Draw(t, "steps") {
			w := rapid.SampledFrom([]string{"w1", "w2", "w3"}).Draw(t, "worker")
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0, 1, 2, 3:
				c := Call{Op: OpAllow, Actor: w, Token: "t" + string(rune('a'+i%26))}
				var er, sr Result
				var ev, sv []Event
				enf, er, ev = Apply(p, enf, c, now)
				sh, sr, sv = Apply(sp, sh, c, now)
				if sr.Decision != pb.Decision_DECISION_ALLOWED || sr.RetryAfter != 0 || sr.ShadowDecision != er.Decision {
					t.Fatalf("step %d: shadow Allow %v (retry %d, shadow %v), enforced %v", i, sr.Decision, sr.RetryAfter, sr.ShadowDecision, er.Decision)
				}
				checkShadowEvents(t, i, ev, sv)
				delete(enfTicket, w)
				if er.Decision == pb.Decision_DECISION_ALLOWED || er.Decision == pb.Decision_DECISION_PROBE {
					tk := Ticket{Gen: enf.Gen}
					if er.Decision == pb.Decision_DECISION_PROBE {
						tk.Lease = c.Token
					}
					enfTicket[w] = &tk
				}
				tk := Ticket{Gen: sh.Gen, Shadow: ShadowDenied(sr.ShadowDecision)}
				if sr.ShadowDecision == pb.Decision_DECISION_PROBE {
					tk.Lease = c.Token
				}
				shTicket[w] = &tk
			case 4, 5, 6, 7:
				st := shTicket[w]
				if st == nil {
					continue
				}
				c := Call{Op: OpRecord, Actor: w, Evidence: rapid.SampledFrom(evidences).Draw(t, "evidence"),
					Latency: rapid.SampledFrom([]int64{100, 2001}).Draw(t, "latency"), Last: "x", CredentialWorked: true}
				c.Ticket = *st
				var sr Result
				var sv []Event
				sh, sr, sv = Apply(sp, sh, c, now)
				if st.Shadow {
					if sr.Counted || sr.Note != NoteShadowDenied || len(sv) != 0 {
						t.Fatalf("step %d: a shadow-denied Record: counted %v, note %q, %d events", i, sr.Counted, sr.Note, len(sv))
					}
					if enfTicket[w] != nil {
						t.Fatalf("step %d: shadow denied %s, enforced allowed it", i, w)
					}
				} else {
					et := enfTicket[w]
					if et == nil || et.Gen != st.Gen || et.Lease != st.Lease {
						t.Fatalf("step %d: shadow ticket %+v, enforced %+v", i, st, et)
					}
					c.Ticket = *et
					var er Result
					var ev []Event
					enf, er, ev = Apply(p, enf, c, now)
					if er.Counted != sr.Counted || er.Note != sr.Note {
						t.Fatalf("step %d: enforced Record counted %v %q, shadow %v %q", i, er.Counted, er.Note, sr.Counted, sr.Note)
					}
					checkShadowEvents(t, i, ev, sv)
				}
				delete(shTicket, w)
				delete(enfTicket, w)
			default:
				now += rapid.SampledFrom([]int64{1, 4999, 5000, 10000, 20000}).Draw(t, "advance")
			}
			if a, b := enf.Fields(), sh.Fields(); len(a) != len(b) || !sameFields(a, b) {
				t.Fatalf("step %d: enforced state %v, shadow state %v", i, a, b)
			}
		}
	})
}

func sameFields(a, b map[string]string) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// checkShadowEvents: the shadowed breaker emits the enforced breaker's
// events, each marked shadow.
func checkShadowEvents(t *rapid.T, step int, enforced, shadow []Event) {
	if len(enforced) != len(shadow) {
		t.Fatalf("step %d: %d enforced events, %d shadow events", step, len(enforced), len(shadow))
	}
	for i := range enforced {
		e, s := enforced[i], shadow[i]
		if e.Shadow || !s.Shadow {
			t.Fatalf("step %d: event %d marked %v enforced, %v shadow", step, i, e.Shadow, s.Shadow)
		}
		s.Shadow = false
		if e != s {
			t.Fatalf("step %d: enforced event %+v, shadow %+v", step, e, s)
		}
	}
}

// TestShadowSettingOverridesThePolicy: an operator's setting wins over the
// policy either way; a pin wins over both.
func TestShadowSettingOverridesThePolicy(t *testing.T) {
	for _, tc := range []struct {
		setting, force string
		policy, want   bool
	}{
		{"", "", false, false}, {"", "", true, true},
		{"on", "", false, true}, {"off", "", true, false},
		{"on", "open", true, false}, {"on", "closed", false, false},
	} {
		if got := Shadowing(State{Shadow: tc.setting, Force: tc.force}, tc.policy); got != tc.want {
			t.Errorf("setting %q, pin %q, policy %v: shadowing %v, want %v", tc.setting, tc.force, tc.policy, got, tc.want)
		}
	}
}
