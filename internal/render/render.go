package render

import (
	"strconv"
	"strings"

	"github.com/breakerd/breakerd/conformance"
)

// The parsed templates: embedded files, so a parse error is a build
// defect that every test of this package reports.
var (
	toolResultTmpl = mustParse("tool_result")
	noticeTmpl     = mustParse("notice")
)

func mustParse(name string) []node {
	src, err := conformance.Template(name)
	if err == nil {
		var nodes []node
		if nodes, err = parse(src); err == nil {
			return nodes
		}
	}
	panic("render: template " + name + ": " + err.Error())
}

// The statuses a denial reports.
const (
	StatusCircuitOpen   = "circuit_open"
	StatusProbeInFlight = "probe_in_flight"
)

// Denial is what the tool result of one denied call says.
type Denial struct {
	// Status is StatusCircuitOpen or StatusProbeInFlight.
	Status string
	// Tool is the tool's name as the model knows it.
	Tool string
	// Breaker is the breaker's name.
	Breaker string
	// Reason is why, from the daemon's fixed vocabulary.
	Reason string
	// RetryAfterMs is how long until asking again may help, ms; 0 when
	// unknown.
	RetryAfterMs int64
	// Alternatives are the policy's routes instead; nil renders as [].
	Alternatives []string
	// Forced: an operator forced the circuit open.
	Forced bool
	// Degraded: a local fallback judged the call (breakerd unreachable).
	Degraded bool
	// Scope is the parent scope that denied; "" when the breaker did.
	Scope string
}

// ToolResult renders d by conformance/templates/tool_result.tmpl.
func ToolResult(d Denial) string {
	alts := d.Alternatives
	if alts == nil {
		alts = []string{}
	}
	var b strings.Builder
	execute(&b, toolResultTmpl, []Data{{
		"status": d.Status, "tool": d.Tool, "breaker": d.Breaker, "reason": d.Reason,
		"retry_after_ms": d.RetryAfterMs, "alternatives": alts, "forced": d.Forced,
		"degraded": d.Degraded, "scope": d.Scope,
	}})
	return b.String()
}

// Lost is one tool a run lost, as the notice tells it.
type Lost struct {
	Tool         string
	Status       string
	Reason       string
	Forced       bool
	Degraded     bool
	Scope        string
	Alternatives []string
	// MayReturnAtMs is when the next probe is due or the force ends, ms
	// since the epoch; 0 when unknown.
	MayReturnAtMs int64
}

// Notice renders the run notice over lost at nowMs (ms since the epoch)
// by conformance/templates/notice.tmpl; "" when lost is empty.
func Notice(nowMs int64, lost []Lost) string {
	if len(lost) == 0 {
		return ""
	}
	items := make([]Data, len(lost))
	for i, l := range lost {
		items[i] = derive(nowMs, l)
	}
	var b strings.Builder
	execute(&b, noticeTmpl, []Data{{"denials": items, "now_ms": nowMs}})
	return b.String()
}

// derive adds the derived fields conformance/README.md defines.
func derive(nowMs int64, l Lost) Data {
	subject, object := "It", "it"
	if l.Scope != "" {
		subject, object = l.Scope, l.Scope
	}
	testing := l.Status == StatusProbeInFlight
	backIn := ""
	if !testing && l.MayReturnAtMs > 0 {
		backIn = About(max(l.MayReturnAtMs-nowMs, 1000))
	}
	alts := l.Alternatives
	if alts == nil {
		alts = []string{}
	}
	return Data{
		"tool": l.Tool, "status": l.Status, "reason": strings.TrimRight(l.Reason, ". "),
		"forced": l.Forced, "degraded": l.Degraded, "scope": l.Scope, "alternatives": alts,
		"may_return_at_ms": l.MayReturnAtMs, "subject": subject, "object": object, "testing": testing,
		"back_in": backIn, "forced_no_end": !testing && backIn == "" && l.Forced,
		"no_end": !testing && backIn == "" && !l.Forced,
	}
}

// About renders ms (at least 1000) as the notice's "about" duration:
// whole seconds, whole minutes from an hour up ("1h5m", "2m30s", "45s").
func About(ms int64) string {
	s := (ms + 500) / 1000
	if s >= 3600 {
		s = (s + 30) / 60 * 60
	}
	var b strings.Builder
	for _, p := range []struct {
		n    int64
		unit string
	}{{s / 3600, "h"}, {s % 3600 / 60, "m"}, {s % 60, "s"}} {
		if p.n > 0 {
			b.WriteString(strconv.FormatInt(p.n, 10) + p.unit)
		}
	}
	return b.String()
}
