package render

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

// renderCases is conformance/render.json.
type renderCases struct {
	Cases []struct {
		Name     string          `json:"name"`
		Template string          `json:"template"`
		Fallback string          `json:"fallback"`
		Input    json.RawMessage `json:"input"`
		NowMs    int64           `json:"now_ms"`
		Want     string          `json:"want"`
	} `json:"cases"`
}

// denialJSON is a template's inputs for one denial, exactly.
type denialJSON struct {
	Tool          string   `json:"tool"`
	Status        string   `json:"status"`
	Reason        string   `json:"reason"`
	Forced        bool     `json:"forced"`
	Degraded      bool     `json:"degraded"`
	Scope         string   `json:"scope"`
	Alternatives  []string `json:"alternatives"`
	MayReturnAtMs int64    `json:"may_return_at_ms"`
}

func (d denialJSON) denial() Denial { return Denial(d) }

// TestConformanceRender renders every case of conformance/render.json
// and compares the bytes; a case of the local fallback's own denials
// holds the words of conformance/fallback_denials.json and renders as
// Fallback renders them.
func TestConformanceRender(t *testing.T) {
	b, err := os.ReadFile("../../conformance/render.json")
	if err != nil {
		t.Fatal(err)
	}
	var rc renderCases
	if err := json.Unmarshal(b, &rc); err != nil {
		t.Fatalf("conformance/render.json: %v", err)
	}
	if len(rc.Cases) == 0 {
		t.Fatal("conformance/render.json holds no case")
	}
	for _, c := range rc.Cases {
		t.Run(c.Name, func(t *testing.T) {
			dec := json.NewDecoder(strings.NewReader(string(c.Input)))
			dec.DisallowUnknownFields()
			var got string
			var ds []Denial
			switch c.Template {
			case "tool_result":
				var d denialJSON
				if err := dec.Decode(&d); err != nil {
					t.Fatal(err)
				}
				ds = []Denial{d.denial()}
				got = ToolResult(c.NowMs, ds[0])
			case "notice":
				var in struct {
					Denials []denialJSON `json:"denials"`
				}
				if err := dec.Decode(&in); err != nil {
					t.Fatal(err)
				}
				for _, d := range in.Denials {
					ds = append(ds, d.denial())
				}
				got = Notice(c.NowMs, ds)
			case "tool_failure":
				var in struct {
					Tool string `json:"tool"`
				}
				if err := dec.Decode(&in); err != nil {
					t.Fatal(err)
				}
				// The framework adapters' failure text: Go renders none, but
				// the template is held to the same syntax and vectors.
				var b strings.Builder
				execute(&b, mustParse("tool_failure"), []Data{{"tool": in.Tool}})
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
	b, err := os.ReadFile("../../conformance/render.json")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var rc struct {
		Cases []struct {
			Template string `json:"template"`
			Fallback string `json:"fallback"`
			Input    struct {
				denialJSON
				Denials []denialJSON `json:"denials"`
			} `json:"input"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &rc); err != nil {
		t.Fatal(err)
	}
	for _, c := range rc.Cases {
		for _, d := range append(c.Input.Denials, c.Input.denialJSON) {
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
