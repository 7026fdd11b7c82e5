package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseOverridesByFirstMatchingGlob(t *testing.T) {
	s, err := Parse([]byte(`
defaults:
  threshold: 4
  cooldown_cap: 10m
breakers:
  - match: "stripe:*"
    threshold: 3
    alternatives: [issue_refund_manually]
  - match: "stripe:acct_42"
    threshold: 9
  - match: "web_*"
    min_workers: 3
    cooldown_base: 1m
    jitter: 0
    probe_timeout: 10s
`))
	if err != nil {
		t.Fatal(err)
	}
	def := Default()
	def.Threshold, def.CooldownCap = 4, 10*time.Minute
	stripe := def
	stripe.Threshold, stripe.Alternatives = 3, []string{"issue_refund_manually"}
	web := def
	web.MinWorkers, web.CooldownBase, web.Jitter, web.ProbeTimeout = 3, time.Minute, 0, 10*time.Second
	for name, want := range map[string]Policy{
		"stripe:acct_42": stripe, // the first match wins
		"web_search":     web,
		"crm":            def,
	} {
		if diff := cmp.Diff(want, s.For(name)); diff != "" {
			t.Errorf("For(%q) (-want +got):\n%s", name, diff)
		}
	}
}

func TestParseEmptyIsDefaults(t *testing.T) {
	s, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Default(), s.For("anything")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"defaults:\n  threshold: 0\n", "defaults.threshold: must be at least 1"},
		{"defaults:\n  min_workers: -1\n", "defaults.min_workers"},
		{"defaults:\n  cooldown_base: 1m\n  cooldown_cap: 30s\n", "defaults.cooldown_cap: must be at least cooldown_base"},
		{"defaults:\n  jitter: 1.5\n", "defaults.jitter"},
		{"defaults:\n  jitter: .nan\n", "defaults.jitter"},
		{"defaults:\n  cooldown_cap: 2562047h\n", "defaults.cooldown_cap: must be at most"},
		{"defaults:\n  probe_timeout: 2h\n", "defaults.probe_timeout: must be at most"},
		{"defaults:\n  threshold: 3\n---\ndefaults:\n  threshold: 9\n", "more than one YAML document"},
		{"defaults:\n  probe_timeout: 0s\n", "defaults.probe_timeout"},
		{"defaults:\n  cooldown_base: soon\n", `"soon" is not a duration`},
		{"defaults:\n  treshold: 5\n", "line 2: unknown field treshold"},
		{"breakers:\n  - threshold: 2\n", "breakers[0].match: is required"},
		{"breakers:\n  - match: \"[\"\n", "breakers[0].match: bad pattern"},
		{"breakers:\n  - match: a\n  - match: b\n    cooldown_cap: 1s\n", "breakers[1].cooldown_cap"},
		{"breakers:\n  - match: a\n    alternatives: [\"\"]\n", "breakers[0].alternatives[0]: must not be empty"},
		{"defaults:\n  mode: rate\n", `defaults.mode: must be consecutive or window, got "rate"`},
		{"defaults:\n  window: 5999ms\n", "defaults.window: must be between 6s and 24h0m0s"},
		{"defaults:\n  window: 25h\n", "defaults.window: must be between"},
		{"defaults:\n  failure_rate: 0\n", "defaults.failure_rate: must be more than 0 and at most 1"},
		{"defaults:\n  failure_rate: 1.01\n", "defaults.failure_rate"},
		{"defaults:\n  failure_rate: .nan\n", "defaults.failure_rate"},
		{"breakers:\n  - match: a\n    mode: window\n    min_calls: 1\n", "breakers[0].min_calls: must be at least 2 (one failure out of one call never trips)"},
		{"defaults:\n  threshold: 2.5\n", `line 2: "2.5" is not a whole number`},
		{"breakers:\n  - match: a\n    slow_call: 2s\n    slow_call_threshold: 2.5\n", `line 4: "2.5" is not a whole number`},
		{"defaults:\n  min_workers: [2]\n", "line 2"},
		{"defaults:\n  shadow: yes\n", `defaults.shadow: line 2: "yes" is not true or false`},
		{"breakers:\n  - match: a\n    shadow: 1\n", `breakers[0].shadow: line 3: "1" is not true or false`},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.yaml, err, tc.want)
		}
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	name := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(name, []byte("defaults:\n  threshold: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(name)
	if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "defaults.threshold") {
		t.Errorf("Load = %v, want the file and the field named", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}

func TestRetentionIsCapPlusProbeTimeout(t *testing.T) {
	if got, want := Default().Retention(), 15*time.Minute+30*time.Second; got != want {
		t.Errorf("Retention() = %s, want %s", got, want)
	}
}

func TestWarningsNameEveryShadowedRule(t *testing.T) {
	s, err := Parse([]byte(`
breakers:
  - match: "overlap:*"
    threshold: 3
  - match: "overlap:a*"
    threshold: 4
  - match: "web_search"
    threshold: 6
  - match: "web_*"
    threshold: 7
  - match: "web_search"
    threshold: 8
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`breakers[1] (match "overlap:a*") is shadowed by breakers[0] (match "overlap:*"), which matches first: its overrides never apply to "overlap:a*"`,
		`breakers[4] (match "web_search") is shadowed by breakers[2] (match "web_search"), which matches first: its overrides never apply to "web_search"`,
	}
	if diff := cmp.Diff(want, s.Warnings()); diff != "" {
		t.Errorf("Warnings() (-want +got):\n%s", diff)
	}
	for name, want := range map[string]string{
		"overlap:abc": `breakers[0] (match "overlap:*")`,
		"web_news":    `breakers[3] (match "web_*")`,
		"crm":         "defaults",
	} {
		if got := s.Source(name); got != want {
			t.Errorf("Source(%q) = %q, want %q", name, got, want)
		}
	}
	if s.For("overlap:abc").Threshold != 3 {
		t.Errorf("For(overlap:abc).Threshold = %d, want 3 (the first match)", s.For("overlap:abc").Threshold)
	}
	// Rules in the other order shadow nothing.
	s, err = Parse([]byte("breakers:\n  - match: \"overlap:a*\"\n  - match: \"overlap:*\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if w := s.Warnings(); len(w) != 0 {
		t.Errorf("Warnings() = %q, want none (the narrower rule comes first)", w)
	}
}

func TestWarningsNameFieldsThePolicyDoesNotRead(t *testing.T) {
	s, err := Parse([]byte(`
defaults:
  min_calls: 10
  recovery_check_interval: 1m
breakers:
  - match: "rate:*"
    mode: window
    threshold: 3
  - match: "run:*"
    failure_rate: 0.3
    window: 2m
  - match: "both:*"
    mode: window
    failure_rate: 0.4
  - match: "429:*"
    mode: window
    rate_limit_trips: 2
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"defaults.recovery_check_interval is set but has no effect: no recovery_check is set",
		"breakers[0].threshold is set but has no effect: mode is window",
		"breakers[1].failure_rate is set but has no effect: mode is consecutive",
		"breakers[1].window is set but has no effect: mode is consecutive",
		"breakers[3].rate_limit_trips is set but has no effect: mode is window",
	}
	// defaults.min_calls is read by the window rules: no warning.
	if diff := cmp.Diff(want, s.Warnings()); diff != "" {
		t.Errorf("Warnings() (-want +got):\n%s", diff)
	}
	s, err = Parse([]byte("defaults:\n  min_calls: 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"defaults.min_calls is set but has no effect: mode is consecutive"}, s.Warnings()); diff != "" {
		t.Errorf("no window rule reads defaults.min_calls (-want +got):\n%s", diff)
	}
}

func TestFieldsSpellTheFile(t *testing.T) {
	p := Default()
	p.Alternatives = []string{"a", "b"}
	got := strings.Join(p.Fields(), "\n")
	// Each line parses back into the same policy.
	s, err := Parse([]byte("defaults:\n  " + strings.ReplaceAll(got, "\n", "\n  ") + "\n"))
	if err != nil {
		t.Fatalf("Fields() does not parse back:\n%s\n%v", got, err)
	}
	if diff := cmp.Diff(p, s.Defaults()); diff != "" {
		t.Errorf("Fields() parsed back (-want +got):\n%s", diff)
	}
}

func TestParseWindowMode(t *testing.T) {
	s, err := Parse([]byte("breakers:\n  - match: \"search-vendor:*\"\n    mode: window\n    window: 60s\n    failure_rate: 0.5\n    min_calls: 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Mode, want.Window, want.FailureRate, want.MinCalls = ModeWindow, time.Minute, 0.5, 4
	if diff := cmp.Diff(want, s.For("search-vendor:web")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// The bounds themselves are valid.
	for _, y := range []string{"window: 6s\nfailure_rate: 1\nmin_calls: 2", "window: 24h\nfailure_rate: 0.001"} {
		if _, err := Parse([]byte("defaults:\n  mode: window\n  " + strings.ReplaceAll(y, "\n", "\n  ") + "\n")); err != nil {
			t.Errorf("Parse(%q) = %v, want valid", y, err)
		}
	}
}

// TestFieldsShowWhatApplies: a window-mode policy shows its window fields
// and not the consecutive ones; a recovery check shows without its
// credentials.
func TestFieldsShowWhatApplies(t *testing.T) {
	p := Default()
	p.Mode = ModeWindow
	p.RecoveryCheck = &RecoveryCheck{HTTP: &HTTPCheck{Method: "GET", URL: "https://u:secret@status.example/health?key=k1", ExpectStatus: 200}, Timeout: 5 * time.Second}
	got := strings.Join(p.Fields(), "\n")
	for _, want := range []string{"mode: window", "window: 1m0s", "failure_rate: 0.5", "min_calls: 10",
		"# recovery check: GET https://status.example/health?key=REDACTED every 30s (timeout 5s)"} {
		if !strings.Contains(got, want) {
			t.Errorf("Fields() lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"threshold:", "rate_limit_trips:", "secret", "k1"} {
		if strings.Contains(got, not) {
			t.Errorf("Fields() shows %q:\n%s", not, got)
		}
	}
}

func TestParseSlowCalls(t *testing.T) {
	s, err := Parse([]byte("defaults:\n  slow_call: 2s\n  slow_call_threshold: 5\n" +
		"breakers:\n  - match: \"search-vendor:*\"\n    mode: window\n    slow_call_threshold: 0\n    slow_call_rate: 0.5\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.SlowCall, want.SlowCallThreshold = 2*time.Second, 5
	if diff := cmp.Diff(want, s.For("web")); diff != "" {
		t.Errorf("consecutive (-want +got):\n%s", diff)
	}
	want.Mode, want.SlowCallThreshold, want.SlowCallRate = ModeWindow, 0, 0.5
	if diff := cmp.Diff(want, s.For("search-vendor:web")); diff != "" {
		t.Errorf("window (-want +got):\n%s", diff)
	}
	if got := strings.Join(s.For("web").Fields(), "\n"); !strings.Contains(got, "slow_call: 2s\nslow_call_threshold: 5") {
		t.Errorf("Fields() lacks the slow-call fields:\n%s", got)
	}
}

func TestParseSlowCallErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"defaults:\n  slow_call_threshold: 3\n", "defaults.slow_call_threshold: needs slow_call"},
		{"defaults:\n  mode: window\n  slow_call_rate: 0.5\n", "defaults.slow_call_rate: needs slow_call"},
		{"defaults:\n  slow_call: 2s\n", "defaults.slow_call: needs slow_call_threshold in consecutive mode"},
		{"defaults:\n  mode: window\n  slow_call: 2s\n", "defaults.slow_call: needs slow_call_rate in window mode"},
		{"defaults:\n  slow_call: -1s\n  slow_call_threshold: 3\n", "defaults.slow_call: must be between 0 (off) and"},
		{"defaults:\n  slow_call: 1500us\n  slow_call_threshold: 3\n", "defaults.slow_call: must be a whole number of milliseconds"},
		{"defaults:\n  slow_call: 2s\n  slow_call_threshold: -1\n", "defaults.slow_call_threshold: must be at least 1"},
		{"defaults:\n  slow_call: 2s\n  slow_call_threshold: 3\n  slow_call_rate: 0.5\n", "defaults.slow_call_rate: applies in window mode only"},
		{"defaults:\n  mode: window\n  slow_call: 2s\n  slow_call_rate: 0.5\n  slow_call_threshold: 3\n", "defaults.slow_call_threshold: applies in consecutive mode only"},
		{"defaults:\n  mode: window\n  slow_call: 2s\n  slow_call_rate: 1.5\n", "defaults.slow_call_rate: must be more than 0 and at most 1"},
		{"defaults:\n  mode: window\n  slow_call: 2s\n  slow_call_rate: .nan\n", "defaults.slow_call_rate"},
		{"breakers:\n  - match: a\n    slow_call: soon\n", `"soon" is not a duration`},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.yaml, err, tc.want)
		}
	}
}

func TestParseShadow(t *testing.T) {
	s, err := Parse([]byte("defaults:\n  shadow: true\nbreakers:\n  - match: \"pay:*\"\n    shadow: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !s.For("web").Shadow || s.For("pay:refund").Shadow {
		t.Errorf("shadow: web %v, pay:refund %v; want true, false", s.For("web").Shadow, s.For("pay:refund").Shadow)
	}
	if got := strings.Join(s.For("web").Fields(), "\n"); !strings.Contains(got, "shadow: true") {
		t.Errorf("Fields() lacks shadow:\n%s", got)
	}
}

// count_unrecognised is off by default, set per rule, shown by Fields,
// and a value other than true or false is refused naming the field.
func TestParseCountUnrecognised(t *testing.T) {
	if Default().CountUnrecognised {
		t.Error("Default().CountUnrecognised = true, want false: an unrecognised error is not counted unless asked")
	}
	s, err := Parse([]byte("breakers:\n  - match: \"quote:*\"\n    count_unrecognised: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !s.For("quote:get").CountUnrecognised || s.For("web").CountUnrecognised {
		t.Errorf("count_unrecognised: quote:get %v, web %v; want true, false", s.For("quote:get").CountUnrecognised, s.For("web").CountUnrecognised)
	}
	if got := strings.Join(s.For("quote:get").Fields(), "\n"); !strings.Contains(got, "count_unrecognised: true") {
		t.Errorf("Fields() lacks count_unrecognised:\n%s", got)
	}
	_, err = Parse([]byte("defaults:\n  count_unrecognised: sometimes\n"))
	if err == nil || !strings.Contains(err.Error(), "defaults.count_unrecognised") {
		t.Errorf("Parse(count_unrecognised: sometimes) = %v, want an error naming defaults.count_unrecognised", err)
	}
}

// A rule that changes mode and writes no slow-call field of its own does
// not inherit defaults' slow-call counting of the other mode: no error
// about fields it never wrote, a warning that says what happened.
func TestParseModeChangeDropsInheritedSlowCalls(t *testing.T) {
	s, err := Parse([]byte("defaults:\n  slow_call: 2s\n  slow_call_threshold: 5\n" +
		"breakers:\n  - match: \"search:*\"\n    mode: window\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	got := s.For("search:web")
	if got.Mode != ModeWindow || got.SlowCall != 0 || got.SlowCallThreshold != 0 || got.SlowCallRate != 0 {
		t.Errorf("window rule = %+v, want window mode with slow calls off", got)
	}
	if d := s.For("web"); d.SlowCall != 2*time.Second || d.SlowCallThreshold != 5 {
		t.Errorf("defaults = %+v, want slow calls as written", d)
	}
	want := "breakers[0]: defaults.slow_call, defaults.slow_call_threshold"
	warns := strings.Join(s.Warnings(), "\n")
	if !strings.Contains(warns, "breakers[0]: defaults.slow_call does not apply in mode window") ||
		!strings.Contains(warns, "breakers[0]: defaults.slow_call_threshold does not apply in mode window") {
		t.Errorf("warnings %q, want %s named", warns, want)
	}

	// The reverse: window defaults with slow_call_rate, a consecutive rule.
	s, err = Parse([]byte("defaults:\n  mode: window\n  slow_call: 2s\n  slow_call_rate: 0.5\n" +
		"breakers:\n  - match: \"a*\"\n    mode: consecutive\n"))
	if err != nil {
		t.Fatalf("Parse (reverse): %v", err)
	}
	if got := s.For("ab"); got.SlowCall != 0 || got.SlowCallRate != 0 {
		t.Errorf("consecutive rule = %+v, want slow calls off", got)
	}

	// A window rule that sets slow_call_rate keeps defaults' slow_call.
	s, err = Parse([]byte("defaults:\n  slow_call: 2s\n  slow_call_threshold: 5\n" +
		"breakers:\n  - match: \"a*\"\n    mode: window\n    slow_call_rate: 0.4\n"))
	if err != nil {
		t.Fatalf("Parse (rate): %v", err)
	}
	if got := s.For("ab"); got.SlowCall != 2*time.Second || got.SlowCallThreshold != 0 || got.SlowCallRate != 0.4 || len(s.Warnings()) != 0 {
		t.Errorf("window rule with a rate = %+v, warnings %q", got, s.Warnings())
	}

	// A rule that writes a slow-call field is validated as written.
	if _, err := Parse([]byte("defaults:\n  slow_call: 2s\n  slow_call_threshold: 5\n" +
		"breakers:\n  - match: \"a*\"\n    mode: window\n    slow_call: 3s\n")); err == nil ||
		!strings.Contains(err.Error(), "breakers[0].slow_call: needs slow_call_rate in window mode") {
		t.Errorf("Parse = %v, want the rule's own slow_call validated", err)
	}
}

func TestParseCostPerCall(t *testing.T) {
	s, err := Parse([]byte("breakers:\n  - match: \"pay:*\"\n    cost_per_call: {amount: 0.1, currency: USD}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c := s.For("pay:refund").CostPerCall; c == nil || *c != (Cost{Amount: 0.1, Currency: "USD"}) {
		t.Errorf("pay:refund cost_per_call = %v, want 0.1 USD", c)
	}
	if c := s.For("web").CostPerCall; c != nil {
		t.Errorf("web cost_per_call = %v, want none (the default)", c)
	}
	if got := strings.Join(s.For("pay:refund").Fields(), "\n"); !strings.Contains(got, "cost_per_call: {amount: 0.1, currency: USD}") {
		t.Errorf("Fields() lacks cost_per_call:\n%s", got)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"defaults:\n  cost_per_call: {amount: -1, currency: USD}\n", "defaults.cost_per_call.amount: must be a finite number of at least 0, got -1"},
		{"defaults:\n  cost_per_call: {amount: .inf, currency: USD}\n", "defaults.cost_per_call.amount"},
		{"defaults:\n  cost_per_call: {amount: .nan, currency: USD}\n", "defaults.cost_per_call.amount"},
		{"defaults:\n  cost_per_call: {currency: USD}\n", "defaults.cost_per_call.amount"},
		{"defaults:\n  cost_per_call: {amount: 1}\n", `defaults.cost_per_call.currency: must be 1 to 8 letters (USD, EUR, credits), got ""`},
		{"breakers:\n  - match: a\n    cost_per_call: {amount: 1, currency: \"$\"}\n", "breakers[0].cost_per_call.currency"},
		{"defaults:\n  cost_per_call: {amount: 1, currency: USD, per: call}\n", "unknown field per"},
		{"defaults:\n  cost_per_call: 0.1\n", "cost_per_call"},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.yaml, err, tc.want)
		}
	}
}
