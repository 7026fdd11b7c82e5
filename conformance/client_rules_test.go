package conformance_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/breakerd/breakerd/conformance"
	"github.com/breakerd/breakerd/internal/classify"
	"github.com/breakerd/breakerd/internal/policy"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestClientRulesFollowTheirSources holds client_rules.json to the one
// source of each of its facts: the defaults to policy.Default, the wait
// headers to the daemon's classifier (classify.WaitHeaders, which reads
// names, never prefixes).
func TestClientRulesFollowTheirSources(t *testing.T) {
	got, err := conformance.ReadClientRules()
	if err != nil {
		t.Fatal(err)
	}
	var want conformance.ClientRules
	d := policy.Default()
	want.Defaults.Threshold = int64(d.Threshold)
	want.Defaults.CooldownBaseMs = d.CooldownBase.Milliseconds()
	want.Defaults.CooldownCapMs = d.CooldownCap.Milliseconds()
	want.Defaults.ProbeTimeoutMs = d.ProbeTimeout.Milliseconds()
	want.WaitHeaders = classify.WaitHeaders()
	want.WaitHeaderPrefixes = []string{}
	want.FallbackCounts = got.FallbackCounts // checked below
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("client_rules.json drifted from its sources (-want +got):\n%s", diff)
	}
}

// TestClientRulesFallbackRows: every row fallback_counts names is a
// classification.json row under the default policy (the fallback has no
// other), and the rows cover what every fallback must count alike: HTTP
// 408, 5xx, a 429 with no wait header, each transport error kind, a
// timeout, an unrecognised error, and 4xx that never count.
func TestClientRulesFallbackRows(t *testing.T) {
	rules, err := conformance.ReadClientRules()
	if err != nil {
		t.Fatal(err)
	}
	table, err := conformance.ReadClassification()
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]conformance.ClassificationRow{}
	for _, r := range table {
		rows[r.Name] = r
	}
	covered := map[string]bool{}
	for _, name := range rules.FallbackCounts {
		r, ok := rows[name]
		if !ok {
			t.Errorf("fallback_counts names %q: no classification.json row has that name", name)
			continue
		}
		if r.CountUnrecognised || (r.BareRateLimitWaitMs != 0 && r.BareRateLimitWaitMs != classify.DefaultBareWait.Milliseconds()) {
			t.Errorf("fallback_counts names %q, a row under a policy other than the default", name)
		}
		ev := &pb.CallEvidence{}
		if err := protojson.Unmarshal(r.Evidence, ev); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		switch s := ev.GetHttpStatus(); {
		case s == 408:
			covered["HTTP 408"] = true
		case s == 429 && len(ev.GetHeaders()) == 0:
			covered["HTTP 429 without a wait header"] = true
		case s >= 500:
			covered["5xx"] = true
		case s >= 400 && s != 429:
			covered["4xx"] = true
		}
		covered[ev.GetErrorKind().String()] = true
	}
	for _, need := range []string{"4xx", "5xx", "HTTP 408", "HTTP 429 without a wait header",
		"ERROR_KIND_DNS", "ERROR_KIND_TLS", "ERROR_KIND_REFUSED", "ERROR_KIND_RESET", "ERROR_KIND_TIMEOUT", "ERROR_KIND_OTHER"} {
		if !covered[need] {
			t.Errorf("fallback_counts has no row for %s", need)
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(rules.FallbackCounts)))) != len(rules.FallbackCounts) {
		t.Error("fallback_counts names a row twice")
	}
}
