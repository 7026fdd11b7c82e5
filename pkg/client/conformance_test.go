package client

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/conformance"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// fallbackCases is conformance/fallback.json (its format is
// conformance/README.md's).
type fallbackCases struct {
	Cases []struct {
		Name   string `json:"name"`
		Policy struct {
			Threshold      int   `json:"threshold"`
			CooldownBaseMs int64 `json:"cooldown_base_ms"`
			CooldownCapMs  int64 `json:"cooldown_cap_ms"`
			ProbeTimeoutMs int64 `json:"probe_timeout_ms"`
		} `json:"policy"`
		Steps []struct {
			AtMs    int64  `json:"at_ms"`
			Op      string `json:"op"`
			Outcome string `json:"outcome"`
			Want    struct {
				Decision     string `json:"decision"`
				RetryAfterMs int64  `json:"retry_after_ms"`
			} `json:"want"`
		} `json:"steps"`
	} `json:"cases"`
}

// TestConformanceFallback holds the local fallback breaker to the cases
// every client's fallback is held to.
func TestConformanceFallback(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../conformance/fallback.json")
	if err != nil {
		t.Fatal(err)
	}
	var fc fallbackCases
	if err := json.Unmarshal(b, &fc); err != nil {
		t.Fatalf("conformance/fallback.json: %v", err)
	}
	if len(fc.Cases) == 0 {
		t.Fatal("conformance/fallback.json holds no case")
	}
	for _, c := range fc.Cases {
		t.Run(c.Name, func(t *testing.T) {
			var now int64
			ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
			l := newLocalBreaker(LocalPolicy{Threshold: c.Policy.Threshold, CooldownBase: ms(c.Policy.CooldownBaseMs),
				CooldownCap: ms(c.Policy.CooldownCapMs), ProbeTimeout: ms(c.Policy.ProbeTimeoutMs)},
				func() time.Time { return time.UnixMilli(now) })
			var granted *pb.Ticket
			for i, s := range c.Steps {
				now = s.AtMs
				switch s.Op {
				case "allow":
					p := l.allow("dep")
					got := p.Decision.String()
					if got != s.Want.Decision || p.RetryAfter.Milliseconds() != s.Want.RetryAfterMs {
						t.Errorf("step %d at %dms: Allow = %s retry %dms, want %s retry %dms", i, now, got,
							p.RetryAfter.Milliseconds(), s.Want.Decision, s.Want.RetryAfterMs)
					}
					if p.Decision == pb.Decision_DECISION_ALLOWED || p.Decision == pb.Decision_DECISION_PROBE {
						granted = p.Ticket
					}
				case "record":
					o, ok := pb.Outcome_value[s.Outcome]
					if !ok || granted == nil {
						t.Fatalf("step %d: record %q with no granted allow or an unknown outcome", i, s.Outcome)
					}
					l.record("dep", granted, Result{Outcome: pb.Outcome(o)})
				default:
					t.Fatalf("step %d: unknown op %q", i, s.Op)
				}
			}
		})
	}
}

// TestConformanceRenderThroughTheClient renders every case of
// conformance/render.json as the client does (Denial.JSON for a tool
// result, a run's notice for the notice) and holds each fallback case to
// what the local fallback builds.
func TestConformanceRenderThroughTheClient(t *testing.T) {
	t.Parallel()
	cases, err := conformance.ReadRender()
	if err != nil {
		t.Fatal(err)
	}
	denial := func(i conformance.RenderInput, nowMs int64) Denial {
		d := Denial{Tool: i.Tool, Status: i.Status, Reason: i.Reason, Scope: i.Scope, Forced: i.Forced, Degraded: i.Degraded,
			Alternatives: i.Alternatives, At: time.UnixMilli(nowMs)}
		if i.MayReturnAtMs > 0 {
			d.MayReturnAt = time.UnixMilli(i.MayReturnAtMs)
		}
		return d
	}
	for _, c := range cases {
		var got string
		switch c.Template {
		case "tool_result":
			got = string(denial(c.Input, c.NowMs).JSON())
		case "notice":
			clock := &fakeClock{t: time.UnixMilli(c.NowMs)}
			run := NewRun(&Client{core: &core{o: options{clock: clock}}})
			for _, i := range c.Input.Denials {
				d := denial(i, c.NowMs)
				run.lost = append(run.lost, Unavailable{Tool: i.Tool, Alternatives: i.Alternatives, Degraded: i.Degraded,
					denial: &pb.Denial{Status: d.Status, Reason: d.Reason, Forced: d.Forced, Scope: scopeOf(d.Scope),
						MayReturnAtMs: i.MayReturnAtMs}})
			}
			got = run.Notice()
		default:
			continue // tool_failure: the framework adapters' text, which the Go client does not give
		}
		if got != c.Want {
			t.Errorf("%s (%s):\n got %q\nwant %q", c.Name, c.Template, got, c.Want)
		}
		if c.Fallback != "" && c.Template == "tool_result" {
			d := fallbackDenial(map[string]pb.Decision{"open": pb.Decision_DECISION_DENIED_OPEN,
				"probe_in_flight": pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT}[c.Fallback], 0, c.Input.MayReturnAtMs)
			if d.GetStatus() != c.Input.Status || d.GetReason() != c.Input.Reason || d.GetMayReturnAtMs() != c.Input.MayReturnAtMs {
				t.Errorf("%s: the fallback builds %v, want the case's input %+v", c.Name, d, c.Input)
			}
		}
	}
}

func scopeOf(word string) pb.DenialScope {
	return map[string]pb.DenialScope{"breaker": pb.DenialScope_DENIAL_SCOPE_BREAKER, "parent": pb.DenialScope_DENIAL_SCOPE_PARENT,
		"worker": pb.DenialScope_DENIAL_SCOPE_WORKER}[word]
}

// TestDaemonDegradedDenialRendersDegraded: a denial breakerd answered
// from its own memory (its Redis unreachable: AllowResponse.degraded)
// renders with degraded true, as conformance/README.md's degraded says.
func TestDaemonDegradedDenialRendersDegraded(t *testing.T) {
	t.Parallel()
	p := permitOf("b", &pb.AllowResponse{Decision: pb.Decision_DECISION_DENIED_OPEN, Degraded: true,
		Denial: &pb.Denial{Decision: pb.Decision_DECISION_DENIED_OPEN, Status: "circuit_open", Reason: "it is failing"}}, time.UnixMilli(1))
	d, ok := AsDenial(DeniedError(p), "search")
	if !ok || !d.Degraded || !strings.HasSuffix(string(d.JSON()), `"degraded":true}`) {
		t.Errorf("a daemon's outage-memory denial renders %s, want degraded", d.JSON())
	}
}
