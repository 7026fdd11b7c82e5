package render

import (
	"reflect"
	"strings"
	"testing"

	"github.com/breakerd/breakerd/conformance"
)

// denial is a case's input for one denial as the templates take it; a
// notice's input holds nothing but its denials, a tool result's none.
func denial(in conformance.RenderInput) Denial {
	return Denial{Tool: in.Tool, Status: in.Status, Reason: in.Reason, Forced: in.Forced, Degraded: in.Degraded,
		Scope: in.Scope, Alternatives: in.Alternatives, MayReturnAtMs: in.MayReturnAtMs}
}

// TestConformanceRender renders every case of conformance/render.json
// and compares the bytes; a case of the local fallback's own denials
// holds the words of conformance/fallback_denials.json and renders as
// Fallback renders them.
func TestConformanceRender(t *testing.T) {
	cases, err := conformance.ReadRender()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			var got string
			var ds []Denial
			switch c.Template {
			case "tool_result":
				if c.Input.Denials != nil {
					t.Fatal("a tool result's input holds denials")
				}
				ds = []Denial{denial(c.Input)}
				got = ToolResult(c.NowMs, ds[0])
			case "notice":
				if own := c.Input; !reflect.DeepEqual(conformance.RenderInput{Denials: own.Denials}, own) {
					t.Fatalf("a notice's input holds more than its denials: %+v", own)
				}
				for _, d := range c.Input.Denials {
					ds = append(ds, denial(d))
				}
				got = Notice(c.NowMs, ds)
			case "tool_failure":
				if own := c.Input; !reflect.DeepEqual(conformance.RenderInput{Tool: own.Tool}, own) {
					t.Fatalf("a tool failure's input holds more than its tool: %+v", own)
				}
				// The framework adapters' failure text: Go renders none, but
				// the template is held to the same syntax and vectors.
				var b strings.Builder
				execute(&b, mustParse("tool_failure"), []Data{{"tool": c.Input.Tool}})
				got = b.String()
			default:
				t.Fatalf("unknown template %q", c.Template)
			}
			if got != c.Want {
				t.Errorf("render %s:\n got %q\nwant %q", c.Template, got, c.Want)
			}
			if c.Fallback != "" {
				d := ds[0]
				want := Fallback(d.Tool, c.Fallback == "probe_in_flight", d.MayReturnAtMs)
				want.Alternatives = d.Alternatives
				if !reflect.DeepEqual(d, want) {
					t.Errorf("a case of the fallback's %s denial: input %+v, the fallback's %+v", c.Fallback, d, want)
				}
			}
		})
	}
}

// TestVectorsCoverEveryStatus: render.json renders each status word the
// daemon sends, degraded answers and both of the fallback's denials,
// through both templates.
func TestVectorsCoverEveryStatus(t *testing.T) {
	cases, err := conformance.ReadRender()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range cases {
		for _, d := range append(c.Input.Denials, c.Input) {
			if d.Status != "" {
				seen[c.Template+" "+d.Status] = true
				seen[c.Template+" degraded"] = seen[c.Template+" degraded"] || d.Degraded
			}
		}
		if c.Fallback != "" {
			seen[c.Template+" fallback "+c.Fallback] = true
		}
	}
	for _, tmpl := range []string{"tool_result", "notice"} {
		for _, want := range []string{"circuit_open", "probe_in_flight", "forced_open", "paused", "worker_isolated",
			"parent_open", "degraded", "fallback open", "fallback probe_in_flight"} {
			if !seen[tmpl+" "+want] {
				t.Errorf("render.json has no %s case for %s", tmpl, want)
			}
		}
	}
}

func TestParseRefusesMalformedTags(t *testing.T) {
	for _, src := range []string{"{{ name }}", "{{Name}}", "{{#a}}x", "{{/a}}", "{{#a}}{{/b}}", "{{a|upper}}", "{{#a|json}}{{/a}}", "{{"} {
		if _, err := parse(src); err == nil {
			t.Errorf("parse(%q) = nil error, want one", src)
		}
	}
	if _, err := parse("a } b }} c {"); err != nil {
		t.Errorf("parse of plain braces: %v", err)
	}
}
