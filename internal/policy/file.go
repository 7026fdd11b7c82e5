package policy

import (
	"fmt"
	"math"
	"os"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/breakerd/breakerd/internal/yamlfile"
)

// Set resolves the Policy of each breaker: the first rule whose pattern
// matches the breaker's name applies its overrides on top of the defaults.
// A Set is immutable and safe for concurrent use.
type Set struct {
	defaults Policy
	// defaultsSet names the fields the file's defaults section writes.
	defaultsSet map[string]bool
	rules       []rule
	groups      []Group
	memberOf    map[string]int // a group member's group, by index in groups
	warnings    []string
	// matched remembers which rule each breaker For was asked about
	// matched, so that a breaker's every call does not match its name
	// against every pattern again; nil remembers nothing.
	matched *matchMemo
}

// matchMemo is the index of the rule a breaker matched (-1: none), for up
// to matchMemoMax breakers; past that, names are matched each time.
type matchMemo struct {
	mu sync.RWMutex
	by map[string]int
}

// matchMemoMax bounds the breakers a Set remembers the rule of: a fleet's
// busy breakers fit, a flood of new names costs memory only up to it.
const matchMemoMax = 1 << 14

type rule struct {
	match  string
	policy Policy
	set    map[string]bool // the fields the rule writes, by YAML name
}

// NewSet returns a Set where every breaker gets p.
func NewSet(p Policy) *Set { return &Set{defaults: p} }

// newMatchMemo returns an empty matchMemo.
func newMatchMemo() *matchMemo { return &matchMemo{by: map[string]int{}} }

// For returns the policy of the named breaker.
func (s *Set) For(breaker string) Policy {
	if i := s.ruleOf(breaker); i >= 0 {
		return s.rules[i].policy
	}
	return s.defaults
}

// ruleOf is the index of the first rule whose pattern matches breaker, or
// -1, remembered in s.matched.
func (s *Set) ruleOf(breaker string) int {
	if len(s.rules) == 0 {
		return -1
	}
	m := s.matched
	if m != nil {
		m.mu.RLock()
		i, ok := m.by[breaker]
		m.mu.RUnlock()
		if ok {
			return i
		}
	}
	i := -1
	for j, r := range s.rules {
		if ok, _ := path.Match(r.match, breaker); ok {
			i = j
			break
		}
	}
	if m != nil {
		m.mu.Lock()
		if len(m.by) < matchMemoMax {
			m.by[breaker] = i
		}
		m.mu.Unlock()
	}
	return i
}

// Defaults returns the policy of breakers no rule matches.
func (s *Set) Defaults() Policy { return s.defaults }

// Source names where the named breaker's policy comes from: the first
// rule that matches it (`breakers[1] (match "web_*")`), or "defaults".
func (s *Set) Source(breaker string) string {
	for i, r := range s.rules {
		if ok, _ := path.Match(r.match, breaker); ok {
			return fmt.Sprintf("breakers[%d] (match %q)", i, r.match)
		}
	}
	return "defaults"
}

// Declares reports whether the policy names the breaker itself: a rule
// whose match is its exact name (no glob), or a group that lists it. A
// worker can name breakers a glob matches, never make one the policy
// declares.
func (s *Set) Declares(breaker string) bool {
	if _, ok := s.memberOf[breaker]; ok {
		return true
	}
	for _, r := range s.rules {
		if r.match == breaker && !strings.ContainsAny(r.match, `*?[\`) {
			return true
		}
	}
	return false
}

// Sources says, for every field of a policy section (by its name in the
// file), what set the named breaker's value: the first rule that matches
// it (`breakers[1] (match "web_*")`) when that rule writes the field,
// "defaults" when the file's defaults section does, else "default" (the
// built-in default).
func (s *Set) Sources(breaker string) map[string]string {
	var r *rule
	at := ""
	for i := range s.rules {
		if ok, _ := path.Match(s.rules[i].match, breaker); ok {
			r, at = &s.rules[i], fmt.Sprintf("breakers[%d] (match %q)", i, s.rules[i].match)
			break
		}
	}
	out := map[string]string{}
	for _, name := range FieldNames() {
		switch {
		case r != nil && r.set[name]:
			out[name] = at
		case s.defaultsSet[name]:
			out[name] = "defaults"
		default:
			out[name] = "default"
		}
	}
	return out
}

// FieldNames returns the name of every field a policy section may set, in
// the file's order (read from the section's own YAML tags).
func FieldNames() []string {
	t := reflect.TypeOf(overrides{})
	out := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		out = append(out, strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0])
	}
	return out
}

// written names the fields o writes (a pointer or list that is set).
func (o overrides) written() map[string]bool {
	v, names := reflect.ValueOf(o), FieldNames()
	out := map[string]bool{}
	for i, name := range names {
		if !v.Field(i).IsNil() {
			out[name] = true
		}
	}
	return out
}

// Warnings lists what in the file has no effect, one sentence each: the
// rules that an earlier rule shadows, in file order (a rule whose
// pattern, read as a breaker name, is matched by an earlier rule's
// pattern, `overlap:a*` after `overlap:*`, never applies to at least that
// name, and usually to none), then the fields a section sets that its
// policy does not read (`threshold` and `rate_limit_trips` in window mode; `window`,
// `failure_rate` or `min_calls` in consecutive mode;
// `recovery_check_interval` with no `recovery_check`), then the groups
// that give a match pattern (ignored: a group lists its members). They are warnings,
// not errors: the file is valid and the first match wins.
func (s *Set) Warnings() []string { return s.warnings }

// HoldsCredentials reports whether a recovery check of the file sends
// credentials (headers, often an API key, or user:pass@ in its URL): the
// file is then a secret, and one every local user may read is worth a
// warning.
func (s *Set) HoldsCredentials() bool {
	if s.defaults.RecoveryCheck.credentials() {
		return true
	}
	for _, r := range s.rules {
		if r.policy.RecoveryCheck.credentials() {
			return true
		}
	}
	return false
}

// unused names the fields o sets that a policy p does not read.
func (o overrides) unused(p Policy) []string {
	var out []string
	if p.Mode == ModeWindow {
		if o.Threshold != nil {
			out = append(out, "threshold")
		}
		if o.RateLimitTrips != nil {
			out = append(out, "rate_limit_trips")
		}
	} else {
		for name, set := range map[string]bool{"window": o.Window != nil, "failure_rate": o.FailureRate != nil, "min_calls": o.MinCalls != nil} {
			if set {
				out = append(out, name)
			}
		}
	}
	if p.RecoveryCheck == nil && o.RecoveryCheckInterval != nil {
		out = append(out, "recovery_check_interval")
	}
	if p.Parent == "" && o.CountTowardParent != nil {
		out = append(out, "count_toward_parent")
	}
	slices.Sort(out)
	return out
}

// inactive returns the warnings for fields set where no policy reads
// them: in a rule, by the rule's own policy; in defaults, by the defaults
// and by every rule (a rule inherits what defaults set).
func inactive(f file, s *Set) []string {
	var out []string
	say := func(at string, fields []string, p Policy) {
		for _, name := range fields {
			why := "mode is " + p.Mode
			switch name {
			case "recovery_check_interval":
				why = "no recovery_check is set"
			case "count_toward_parent":
				why = "no parent is set"
			}
			out = append(out, fmt.Sprintf("%s.%s is set but has no effect: %s", at, name, why))
		}
	}
	unread := f.Defaults.unused(s.defaults)
	for _, r := range s.rules {
		unread = slices.DeleteFunc(unread, func(name string) bool { return !slices.Contains(f.Defaults.unused(r.policy), name) })
	}
	say("defaults", unread, s.defaults)
	for i, b := range f.Breakers {
		say(fmt.Sprintf("breakers[%d]", i), b.unused(s.rules[i].policy), s.rules[i].policy)
	}
	return out
}

// overlaps returns the warnings for rules: each later rule whose pattern,
// read as a name, an earlier rule's pattern matches.
func overlaps(rules []rule) []string {
	var out []string
	for _, sh := range shadowed(len(rules), func(i int) string { return rules[i].match }) {
		later, earlier := rules[sh.later].match, rules[sh.earlier].match
		out = append(out, fmt.Sprintf("breakers[%d] (match %q) is shadowed by breakers[%d] (match %q), which matches first: its overrides never apply to %q",
			sh.later, later, sh.earlier, earlier, later))
	}
	return out
}

// shadowing is one pattern shadowed by an earlier one (see shadowed).
type shadowing struct{ later, earlier int }

// shadowed returns, for n patterns in order (pattern(i) is the i-th),
// each later pattern that an earlier one matches when it is read as a
// name, with the first such earlier one: a name the later pattern was
// written for goes to the earlier one, since the first match wins.
func shadowed(n int, pattern func(int) string) []shadowing {
	var out []shadowing
	for j := range n {
		for i := range j {
			if ok, _ := path.Match(pattern(i), pattern(j)); ok {
				out = append(out, shadowing{later: j, earlier: i})
				break
			}
		}
	}
	return out
}

// file is the YAML shape:
//
//	defaults:
//	  threshold: 5
//	  min_workers: 2
//	  cooldown_base: 30s
//	  cooldown_cap: 15m
//	  jitter: 0.2
//	  probe_timeout: 30s
//	breakers:
//	  - match: "stripe:*"      # Go path.Match glob; the first match wins
//	    threshold: 3
//	    alternatives: [issue_refund_manually]
//	groups:                    # open-fraction caps (group.go)
//	  - name: search
//	    members: [web_search, news_search]
//	    max_open_fraction: 0.5
type file struct {
	Defaults overrides   `yaml:"defaults"`
	Groups   []groupFile `yaml:"groups"`
	Breakers []struct {
		Match     string `yaml:"match"`
		overrides `yaml:",inline"`
	} `yaml:"breakers"`
}

type overrides struct {
	Threshold         *whole             `yaml:"threshold"`
	MinWorkers        *whole             `yaml:"min_workers"`
	RateLimitTrips    *whole             `yaml:"rate_limit_trips"`
	BareRateLimitWait *yamlfile.Duration `yaml:"bare_rate_limit_wait"`
	CooldownBase      *yamlfile.Duration `yaml:"cooldown_base"`
	CooldownCap       *yamlfile.Duration `yaml:"cooldown_cap"`
	Jitter            *float64           `yaml:"jitter"`
	ProbeTimeout      *yamlfile.Duration `yaml:"probe_timeout"`
	PauseTTL          *yamlfile.Duration `yaml:"pause_ttl"`
	Alternatives      []string           `yaml:"alternatives"`
	Mode              *string            `yaml:"mode"`
	Window            *yamlfile.Duration `yaml:"window"`
	FailureRate       *float64           `yaml:"failure_rate"`
	MinCalls          *whole             `yaml:"min_calls"`

	SlowCall          *yamlfile.Duration `yaml:"slow_call"`
	SlowCallThreshold *whole             `yaml:"slow_call_threshold"`
	SlowCallRate      *float64           `yaml:"slow_call_rate"`

	RecoveryCheck         *recoveryFile      `yaml:"recovery_check"`
	RecoveryCheckInterval *yamlfile.Duration `yaml:"recovery_check_interval"`

	Parent            *string  `yaml:"parent"`
	CountTowardParent *boolean `yaml:"count_toward_parent"`

	Shadow *boolean `yaml:"shadow"`

	CountUnrecognised *boolean `yaml:"count_unrecognised"`

	CostPerCall *costFile `yaml:"cost_per_call"`
}

// costFile is cost_per_call as the file writes it:
// {amount: 0.10, currency: USD}. Both are required.
type costFile struct {
	Amount   *float64 `yaml:"amount"`
	Currency *string  `yaml:"currency"`
}

// cost returns the Cost f writes; a missing field reads as an invalid
// value (NaN, ""), which Validate names.
func (f *costFile) cost() *Cost {
	c := &Cost{Amount: math.NaN()}
	if f.Amount != nil {
		c.Amount = *f.Amount
	}
	if f.Currency != nil {
		c.Currency = *f.Currency
	}
	return c
}

func (o overrides) apply(p Policy) Policy {
	if o.Threshold != nil {
		p.Threshold = int(*o.Threshold)
	}
	if o.MinWorkers != nil {
		p.MinWorkers = int(*o.MinWorkers)
	}
	if o.RateLimitTrips != nil {
		p.RateLimitTrips = int(*o.RateLimitTrips)
	}
	if o.BareRateLimitWait != nil {
		p.BareRateLimitWait = time.Duration(*o.BareRateLimitWait)
	}
	if o.CooldownBase != nil {
		p.CooldownBase = time.Duration(*o.CooldownBase)
	}
	if o.CooldownCap != nil {
		p.CooldownCap = time.Duration(*o.CooldownCap)
	}
	if o.Jitter != nil {
		p.Jitter = *o.Jitter
	}
	if o.ProbeTimeout != nil {
		p.ProbeTimeout = time.Duration(*o.ProbeTimeout)
	}
	if o.PauseTTL != nil {
		p.PauseTTL = time.Duration(*o.PauseTTL)
	}
	if o.Alternatives != nil {
		p.Alternatives = o.Alternatives
	}
	if o.Mode != nil {
		p.Mode = *o.Mode
	}
	if o.Window != nil {
		p.Window = time.Duration(*o.Window)
	}
	if o.FailureRate != nil {
		p.FailureRate = *o.FailureRate
	}
	if o.MinCalls != nil {
		p.MinCalls = int(*o.MinCalls)
	}
	if o.SlowCall != nil {
		p.SlowCall = time.Duration(*o.SlowCall)
	}
	if o.SlowCallThreshold != nil {
		p.SlowCallThreshold = int(*o.SlowCallThreshold)
	}
	if o.SlowCallRate != nil {
		p.SlowCallRate = *o.SlowCallRate
	}
	if o.RecoveryCheck != nil {
		p.RecoveryCheck = o.RecoveryCheck.check()
	}
	if o.RecoveryCheckInterval != nil {
		p.RecoveryCheckInterval = time.Duration(*o.RecoveryCheckInterval)
	}
	if o.Parent != nil {
		p.Parent = *o.Parent
	}
	if o.CountTowardParent != nil {
		p.CountTowardParent = bool(*o.CountTowardParent)
	}
	if o.Shadow != nil {
		p.Shadow = bool(*o.Shadow)
	}
	if o.CountUnrecognised != nil {
		p.CountUnrecognised = bool(*o.CountUnrecognised)
	}
	if o.CostPerCall != nil {
		p.CostPerCall = o.CostPerCall.cost()
	}
	return p
}

// whole reads a YAML scalar that must be a whole number: "2.5" is an
// error, not 2 (YAML's decoder would truncate it into an int).
type whole int

func (w *whole) UnmarshalYAML(n *yaml.Node) error {
	v, err := strconv.Atoi(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return fmt.Errorf("line %d: %q is not a whole number", n.Line, n.Value)
	}
	*w = whole(v)
	return nil
}

// boolean reads a YAML scalar that must be true or false: "yes", "on" or
// "1" are errors, not true.
type boolean bool

func (b *boolean) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || (n.Value != "true" && n.Value != "false") {
		return fmt.Errorf("line %d: %q is not true or false", n.Line, n.Value)
	}
	*b = n.Value == "true"
	return nil
}

// Load reads a policy file. Unknown fields, bad values and bad patterns are
// errors that name the field (for example "breakers[1].cooldown_cap: must
// be at least cooldown_base").
func Load(name string) (*Set, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("policy: %s: %w", name, err)
	}
	return s, nil
}

// Parse reads a policy file's contents; see Load. Empty input yields the
// defaults.
func Parse(b []byte) (*Set, error) {
	var f file
	if err := yamlfile.Decode(b, &f); err != nil {
		return nil, err
	}
	s := &Set{defaults: f.Defaults.apply(Default()), defaultsSet: f.Defaults.written(), matched: newMatchMemo()}
	if err := s.defaults.Validate(); err != nil {
		return nil, prefixField("defaults", err)
	}
	for i, b := range f.Breakers {
		at := fmt.Sprintf("breakers[%d]", i)
		if b.Match == "" {
			return nil, fieldErr(at+".match", "is required")
		}
		if _, err := path.Match(b.Match, ""); err != nil {
			return nil, fieldErr(at+".match", "bad pattern %q: %v", b.Match, err)
		}
		p, dropped := b.fitMode(b.apply(s.defaults))
		for _, name := range dropped {
			s.warnings = append(s.warnings, fmt.Sprintf("%s: defaults.%s does not apply in mode %s; slow calls are not counted for it (set the slow-call fields of its mode to count them)", at, name, p.Mode))
		}
		if err := p.Validate(); err != nil {
			return nil, prefixField(at, err)
		}
		s.rules = append(s.rules, rule{match: b.Match, policy: p, set: b.written()})
	}
	if err := s.checkScopes(); err != nil {
		return nil, err
	}
	groups, err := parseGroups(f.Groups)
	if err != nil {
		return nil, err
	}
	s.groups, s.memberOf = groups, indexMembers(groups)
	s.warnings = append(append(overlaps(s.rules), inactive(f, s)...), s.warnings...)
	s.warnings = append(s.warnings, groupPatterns(f.Groups)...)
	return s, nil
}

// fitMode drops the slow-call settings a rule that sets mode inherits
// from defaults but its own mode cannot read, and returns the names of
// those that were counting: with defaults in consecutive mode and
// slow_call_threshold, a rule with mode: window gets no
// slow_call_threshold, and, unless it sets slow_call_rate, no slow-call
// counting (rather than an error about fields it never wrote); the same
// the other way round. What a rule writes itself is validated as written.
func (o overrides) fitMode(p Policy) (Policy, []string) {
	if o.Mode == nil {
		return p, nil
	}
	var dropped []string
	if p.Mode == ModeWindow && o.SlowCallThreshold == nil && p.SlowCallThreshold > 0 {
		p.SlowCallThreshold, dropped = 0, append(dropped, "slow_call_threshold")
	}
	if p.Mode != ModeWindow && o.SlowCallRate == nil && p.SlowCallRate > 0 {
		p.SlowCallRate, dropped = 0, append(dropped, "slow_call_rate")
	}
	if o.SlowCall == nil && p.SlowCall > 0 && p.SlowCallThreshold == 0 && p.SlowCallRate == 0 {
		p.SlowCall, dropped = 0, append([]string{"slow_call"}, dropped...)
	} else if o.SlowCall != nil || p.SlowCallThreshold > 0 || p.SlowCallRate > 0 {
		dropped = nil // slow calls still counted, by the rule's own fields
	}
	return p, dropped
}

// checkScopes checks every section's parent: the policy the parent's own
// name resolves to must have no parent of its own (scopes are one level
// deep), so a parent that names itself, a cycle (a's parent b, b's
// parent a) and a grandparent are errors naming the section's parent
// field.
func (s *Set) checkScopes() error {
	sections := []struct {
		at string
		p  Policy
	}{{"defaults", s.defaults}}
	for i, r := range s.rules {
		sections = append(sections, struct {
			at string
			p  Policy
		}{fmt.Sprintf("breakers[%d]", i), r.policy})
	}
	warned := map[string]bool{}
	for _, sec := range sections {
		parent := sec.p.Parent
		if parent == "" {
			continue
		}
		field := sec.at + ".parent"
		if strings.ContainsAny(parent, "*?[") && !warned[parent] {
			warned[parent] = true // once, not again for each rule that inherits it
			s.warnings = append(s.warnings, fmt.Sprintf("%s: %q looks like a pattern, but a parent is one breaker's name, read literally", field, parent))
		}
		next := s.For(parent).Parent
		switch {
		case next == "":
			continue
		case next == parent:
			return fieldErr(field, "%q would be its own parent: its own policy (%s) names it as parent", parent, s.Source(parent))
		}
		chain := []string{parent}
		for cur := next; cur != ""; cur = s.For(cur).Parent {
			if slices.Contains(chain, cur) {
				return fieldErr(field, "a parent cycle: %s -> %s; scopes are one level deep: remove the parent from all but the top one", strings.Join(chain, " -> "), cur)
			}
			chain = append(chain, cur)
		}
		return fieldErr(field, "%q has a parent of its own (%q, from %s): parent scopes are one level deep",
			parent, next, s.Source(parent))
	}
	return nil
}
