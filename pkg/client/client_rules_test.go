package client

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/breakerd/breakerd/conformance"
	"github.com/breakerd/breakerd/internal/classify"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func readClientRules(t *testing.T) conformance.ClientRules {
	t.Helper()
	r, err := conformance.ReadClientRules()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestFallbackFollowsClientRules: the local fallback's defaults and the
// headers CheckResponse keeps are client_rules.json's.
func TestFallbackFollowsClientRules(t *testing.T) {
	t.Parallel()
	rules := readClientRules(t)
	p := LocalPolicy{}.withDefaults()
	got := rules.Defaults
	got.Threshold, got.CooldownBaseMs = int64(p.Threshold), p.CooldownBase.Milliseconds()
	got.CooldownCapMs, got.ProbeTimeoutMs = p.CooldownCap.Milliseconds(), p.ProbeTimeout.Milliseconds()
	if diff := cmp.Diff(rules.Defaults, got); diff != "" {
		t.Errorf("LocalPolicy defaults differ from client_rules.json (-file +client):\n%s", diff)
	}
	var kept []string
	for _, h := range waitHeaders() {
		kept = append(kept, strings.ToLower(h))
	}
	if diff := cmp.Diff(rules.WaitHeaders, kept); diff != "" {
		t.Errorf("CheckResponse keeps other headers than client_rules.json's wait_headers (-file +client):\n%s", diff)
	}
	if len(rules.WaitHeaderPrefixes) != 0 {
		t.Errorf("wait_header_prefixes %q: CheckResponse keeps no header by prefix", rules.WaitHeaderPrefixes)
	}
}

// TestFallbackCountsAsClientRulesSay runs each classification.json row
// client_rules.json names in fallback_counts through the local fallback
// breaker: the row's evidence, classified as the client classifies it, is
// recorded threshold times, and the local circuit opens exactly when the
// row counts.
func TestFallbackCountsAsClientRulesSay(t *testing.T) {
	t.Parallel()
	rules := readClientRules(t)
	table, err := conformance.ReadClassification()
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, n := range rules.FallbackCounts {
		named[n] = true
	}
	ran := 0
	for _, r := range table {
		if !named[r.Name] {
			continue
		}
		ran++
		ev := &pb.CallEvidence{}
		if err := protojson.Unmarshal(r.Evidence, ev); err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		c := classify.OutcomeOf(classify.Input{Evidence: ev, Deadline: time.Duration(r.DeadlineMs) * time.Millisecond,
			BareWait: DefaultBareRateLimitWait, Now: time.UnixMilli(r.NowMs)})
		clock := newFakeClock()
		l := newLocalBreaker(LocalPolicy{}, clock.Now)
		for range l.pol.Threshold {
			l.record("tool", nil, Result{Outcome: c.Outcome, RetryAfter: c.RetryAfter, Deadline: c.Deadline})
		}
		if open := !l.allow("tool").Allowed(); open != r.Want.Counts {
			t.Errorf("%s: %d × %v opened the local circuit: %v, want %v (the row's counts)",
				r.Name, l.pol.Threshold, c.Outcome, open, r.Want.Counts)
		}
	}
	if ran != len(rules.FallbackCounts) {
		t.Errorf("ran %d of the %d rows fallback_counts names", ran, len(rules.FallbackCounts))
	}
}
