package client

import (
	"encoding/json"
	"os"
	"testing"
	"time"

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
