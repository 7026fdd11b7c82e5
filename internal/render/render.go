package render

import (
	"strconv"
	"strings"

	"github.com/breakerd/breakerd/conformance"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The parsed templates and the fallback's words: embedded files, so a
// parse error is a build defect that every test of this package reports.
var (
	toolResultTmpl = mustParse("tool_result")
	noticeTmpl     = mustParse("notice")
	fallback       = mustFallback()
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

func mustFallback() conformance.FallbackDenials {
	f, err := conformance.Fallback()
	if err != nil {
		panic("render: " + err.Error())
	}
	return f
}

// Denial is one denial as the templates take it (conformance/README.md):
// the daemon's Denial and what the client adds to it.
type Denial struct {
	// Tool is the tool's name as the model knows it.
	Tool string
	// Status and Reason are the Denial's words.
	Status string
	Reason string
	// Forced: an operator forced it (the breaker's pin or its parent's).
	Forced bool
	// Degraded: a fallback judged the call (breakerd, or its Redis,
	// unreachable).
	Degraded bool
	// Scope is the DenialScope's word: breaker, parent or worker.
	Scope string
	// Alternatives are the policy's routes instead; nil renders as [].
	Alternatives []string
	// MayReturnAtMs is when the tool may be back, ms since the epoch; 0
	// when unknown.
	MayReturnAtMs int64
}

// Of is the template input for d, the daemon's denial of tool (whose
// policy's alternatives are alternatives), degraded when a fallback
// answered.
func Of(tool string, d *pb.Denial, alternatives []string, degraded bool) Denial {
	return Denial{Tool: tool, Status: d.GetStatus(), Reason: d.GetReason(), Forced: d.GetForced(), Degraded: degraded,
		Scope: ScopeWord(d.GetScope()), Alternatives: alternatives, MayReturnAtMs: d.GetMayReturnAtMs()}
}

// ScopeWord is the templates' word for a DenialScope: breaker, parent or
// worker (breaker when unspecified).
func ScopeWord(s pb.DenialScope) string {
	switch s {
	case pb.DenialScope_DENIAL_SCOPE_PARENT:
		return "parent"
	case pb.DenialScope_DENIAL_SCOPE_WORKER:
		return "worker"
	}
	return "breaker"
}

// Fallback is the local fallback's own denial of tool
// (conformance/fallback_denials.json): probeInFlight when its probe is
// out, else open, back at mayReturnAtMs; always degraded.
func Fallback(tool string, probeInFlight bool, mayReturnAtMs int64) Denial {
	w := fallback.Open
	if probeInFlight {
		w, mayReturnAtMs = fallback.ProbeInFlight, 0
	}
	return Denial{Tool: tool, Status: w.Status, Reason: w.Reason, Degraded: true, Scope: "breaker", MayReturnAtMs: mayReturnAtMs}
}

// ToolResult renders d at nowMs (ms since the epoch) by
// conformance/templates/tool_result.tmpl.
func ToolResult(nowMs int64, d Denial) string {
	var b strings.Builder
	execute(&b, toolResultTmpl, []Data{{"now_ms": nowMs}, derive(nowMs, d)})
	return b.String()
}

// Notice renders the run notice over lost at nowMs (ms since the epoch)
// by conformance/templates/notice.tmpl; "" when lost is empty.
func Notice(nowMs int64, lost []Denial) string {
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
func derive(nowMs int64, d Denial) Data {
	testing := d.Status == "probe_in_flight"
	var inMs int64
	if !testing && d.MayReturnAtMs > 0 {
		inMs = max(d.MayReturnAtMs-nowMs, 1000)
	}
	backIn := ""
	if inMs > 0 {
		backIn = About(inMs)
	}
	alts := d.Alternatives
	if alts == nil {
		alts = []string{}
	}
	return Data{
		"tool": d.Tool, "status": d.Status, "reason": strings.TrimRight(d.Reason, ". "),
		"forced": d.Forced, "degraded": d.Degraded, "scope": d.Scope, "alternatives": alts,
		"may_return_at_ms": d.MayReturnAtMs, "parent": d.Scope == "parent", "testing": testing,
		"may_return_in_ms": inMs, "back_in": backIn, "no_end": !testing && backIn == "",
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
