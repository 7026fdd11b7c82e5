package render

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// renderCases is conformance/render.json.
type renderCases struct {
	Cases []struct {
		Name     string          `json:"name"`
		Template string          `json:"template"`
		Input    json.RawMessage `json:"input"`
		NowMs    int64           `json:"now_ms"`
		Want     string          `json:"want"`
	} `json:"cases"`
}

type denialJSON struct {
	Status        string   `json:"status"`
	Tool          string   `json:"tool"`
	Breaker       string   `json:"breaker"`
	Reason        string   `json:"reason"`
	RetryAfterMs  int64    `json:"retry_after_ms"`
	Alternatives  []string `json:"alternatives"`
	Forced        bool     `json:"forced"`
	Degraded      bool     `json:"degraded"`
	Scope         string   `json:"scope"`
	MayReturnAtMs int64    `json:"may_return_at_ms"`
}

// TestConformanceRender renders every case of conformance/render.json
// and compares the bytes.
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
			switch c.Template {
			case "tool_result":
				var d denialJSON
				if err := dec.Decode(&d); err != nil {
					t.Fatal(err)
				}
				got = ToolResult(Denial{Status: d.Status, Tool: d.Tool, Breaker: d.Breaker, Reason: d.Reason,
					RetryAfterMs: d.RetryAfterMs, Alternatives: d.Alternatives, Forced: d.Forced,
					Degraded: d.Degraded, Scope: d.Scope})
			case "notice":
				var in struct {
					Denials []denialJSON `json:"denials"`
				}
				if err := dec.Decode(&in); err != nil {
					t.Fatal(err)
				}
				lost := make([]Lost, len(in.Denials))
				for i, d := range in.Denials {
					lost[i] = Lost{Tool: d.Tool, Status: d.Status, Reason: d.Reason, Forced: d.Forced,
						Degraded: d.Degraded, Scope: d.Scope, Alternatives: d.Alternatives, MayReturnAtMs: d.MayReturnAtMs}
				}
				got = Notice(c.NowMs, lost)
			default:
				t.Fatalf("unknown template %q", c.Template)
			}
			if got != c.Want {
				t.Errorf("render %s:\n got %q\nwant %q", c.Template, got, c.Want)
			}
		})
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
