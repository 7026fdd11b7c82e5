// Package check holds deploy/prometheus and deploy/grafana to breakerd:
// every alert rule and dashboard query parses as PromQL and names only
// metrics the daemon registers (read from its registry's descriptors, so
// that counters which appear in a scrape only after their first event
// count too), every alert links an entry of the runbook in
// docs/operations.md, and every alert has unit tests that see it fire and
// stay quiet (run by promtool test rules in scripts/test.sh). It is a
// module of its own so that breakerd's go.mod does not carry Prometheus.
package check

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/breakerd/breakerd/internal/daemon"
	"github.com/breakerd/breakerd/internal/tests/doccheck"
)

const (
	rulesFile = "../breakerd-alerts.yaml"
	testsFile = "../breakerd-alerts_test.yaml"
	runbook   = "../../../docs/operations.md"
	// runbookURL starts every runbook_url: the operations page on GitHub.
	runbookURL = "https://github.com/breakerd/breakerd/blob/main/docs/operations.md#"
)

// scraped are series Prometheus makes itself, not the daemon.
var scraped = map[string]bool{"up": true}

// promql parses as Prometheus does by default (no experimental functions).
var promql = parser.NewParser(parser.Options{})

// fqName reads a descriptor's name from its String form, the one place
// client_golang shows it.
var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// registered returns the metric names the daemon registers, assembled as
// Run assembles it (an embedded Redis, a hooks file so the hook counters
// register too). A histogram's or summary's _bucket, _sum and _count
// series are accepted for every name: descriptors do not carry the type.
func registered(t *testing.T) map[string]bool {
	t.Helper()
	hooks := filepath.Join(t.TempDir(), "hooks.yaml")
	if err := os.WriteFile(hooks, []byte("hooks:\n  - name: oncall\n    url: http://127.0.0.1:9/hook\n    events: [opened]\n    secret: \"0123456789abcdef0123456789abcdef\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := daemon.Defaults()
	c.HooksFile = hooks
	reg, release, err := daemon.Registry(c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("daemon.Registry: %v", err)
	}
	defer release()
	descs := make(chan *prometheus.Desc)
	go func() { reg.Describe(descs); close(descs) }()
	names := map[string]bool{}
	for d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in descriptor %s", d)
		}
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			names[m[1]+suffix] = true
		}
	}
	// The check itself must see the daemon's own metrics, or it proves
	// nothing.
	for _, must := range []string{"breakerd_decisions_total", "breakerd_breaker_state", "breakerd_webhook_failures_total", "go_goroutines"} {
		if !names[must] {
			t.Fatalf("the daemon's registry lacks %s: the descriptors were not read", must)
		}
	}
	return names
}

// metricNames returns the metric names expr selects, or an error for an
// expression that does not parse or a selector with no fixed name.
func metricNames(expr string) ([]string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var out []string
	var bad error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			bad = &parser.ParseErr{Err: errNoName{vs.String()}}
			return bad
		}
		out = append(out, name)
		return nil
	})
	return out, bad
}

type errNoName struct{ sel string }

func (e errNoName) Error() string { return e.sel + ": a selector must name its metric" }

// unknown returns the names expr selects that the daemon does not export.
func unknown(t *testing.T, names map[string]bool, expr string) []string {
	t.Helper()
	used, err := metricNames(expr)
	if err != nil {
		t.Errorf("%q: %v", expr, err)
		return nil
	}
	var out []string
	for _, n := range used {
		if !names[n] && !scraped[n] {
			out = append(out, n)
		}
	}
	return out
}

// The checker catches what it is for: a name the daemon never registers,
// and a query that does not parse.
func TestTheCheckerCanFail(t *testing.T) {
	names := registered(t)
	if got := unknown(t, names, `sum(rate(breakerd_decisons_total[5m]))`); len(got) != 1 {
		t.Errorf("a misspelt metric passed: %v", got)
	}
	if got := unknown(t, names, `histogram_quantile(0.99, sum by (le) (rate(breakerd_rpc_duration_seconds_bucket[5m])))`); len(got) != 0 {
		t.Errorf("a registered histogram's buckets were refused: %v", got)
	}
	if _, err := metricNames(`sum(rate(breakerd_decisions_total[5m])`); err == nil {
		t.Error("an unbalanced expression parsed")
	}
	if _, err := metricNames(`{__name__=~"breakerd_.*"}`); err == nil {
		t.Error("a selector with no fixed name passed")
	}
}

// loadRules parses the rules file as Prometheus does when it loads it.
func loadRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, promql, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, err := range errs {
		t.Errorf("%s: %v", rulesFile, err)
	}
	if groups == nil || len(groups.Groups) == 0 {
		t.Fatalf("%s: no rule groups", rulesFile)
	}
	return groups
}

// Every rule names only the daemon's metrics, and every alert links an
// anchor of the runbook that exists.
func TestRulesNameRegisteredMetricsAndLinkTheRunbook(t *testing.T) {
	names := registered(t)
	text, err := os.ReadFile(runbook)
	if err != nil {
		t.Fatal(err)
	}
	anchors := doccheck.Parse("docs/operations.md", string(text)).Anchors
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if bad := unknown(t, names, r.Expr); len(bad) > 0 {
				t.Errorf("%s: names metrics breakerd does not register: %v", r.Alert, bad)
			}
			if r.Alert == "" {
				continue
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookURL)
			if !ok || !anchors[anchor] {
				t.Errorf("%s: runbook_url %q is not %s<an anchor of docs/operations.md>", r.Alert, r.Annotations["runbook_url"], runbookURL)
			}
			for _, k := range []string{"summary", "description"} {
				if r.Annotations[k] == "" {
					t.Errorf("%s: no %s annotation", r.Alert, k)
				}
			}
			if r.Labels["severity"] != "critical" && r.Labels["severity"] != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, r.Labels["severity"])
			}
		}
	}
}

// unitTests is the part of promtool's test file this check reads.
type unitTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name  string `yaml:"name"`
		Cases []struct {
			Alert string `yaml:"alertname"`
			Exp   []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// Every alert has a unit test that sees it fire and one that sees it
// quiet, so that promtool test rules covers each.
func TestEveryAlertHasUnitTests(t *testing.T) {
	b, err := os.ReadFile(testsFile)
	if err != nil {
		t.Fatal(err)
	}
	var ut unitTests
	if err := yaml.Unmarshal(b, &ut); err != nil {
		t.Fatalf("%s: %v", testsFile, err)
	}
	if len(ut.RuleFiles) != 1 || filepath.Join("..", ut.RuleFiles[0]) != rulesFile {
		t.Errorf("%s tests %v, want [%s]", testsFile, ut.RuleFiles, filepath.Base(rulesFile))
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range ut.Tests {
		for _, c := range tc.Cases {
			if len(c.Exp) > 0 {
				fires[c.Alert] = true
			} else {
				quiet[c.Alert] = true
			}
		}
	}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !fires[r.Alert] {
				t.Errorf("%s: no unit test sees it fire", r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("%s: no unit test sees it stay quiet", r.Alert)
			}
		}
	}
}
