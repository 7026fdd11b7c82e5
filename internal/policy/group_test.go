package policy

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseGroups(t *testing.T) {
	s, err := Parse([]byte(`
groups:
  - name: search
    match: "search:*"
    max_open_fraction: 0.5
  - name: all
    match: "*"
    max_open_fraction: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"search:web": "search", "stripe": "all"} {
		g, ok := s.GroupOf(name)
		if !ok || g.Name != want {
			t.Errorf("GroupOf(%q) = %+v %v, want %q", name, g, ok, want)
		}
	}
	if g, _ := s.GroupOf("search:web"); g.MaxOpenFraction != 0.5 || g.MaxOpenPPM() != 500_000 {
		t.Errorf("search: %+v ppm %d, want 0.5 = 500000 ppm", g, g.MaxOpenPPM())
	}
	if len(s.Warnings()) != 0 {
		t.Errorf("warnings %q, want none", s.Warnings())
	}
	none, _ := Parse(nil)
	if _, ok := none.GroupOf("x"); ok {
		t.Error("a file with no groups put a breaker in one")
	}
}

func TestParseGroupErrorsNameTheField(t *testing.T) {
	for _, c := range []struct{ yaml, field string }{
		{`groups: [{match: "a*", max_open_fraction: 0.5}]`, "groups[0].name"},
		{`groups: [{name: "a b", match: "a*", max_open_fraction: 0.5}]`, "groups[0].name"},
		{`groups: [{name: "a{b}", match: "a*", max_open_fraction: 0.5}]`, "groups[0].name"},
		{`groups: [{name: a, match: "a*", max_open_fraction: 0.5}, {name: a, match: "b*", max_open_fraction: 0.5}]`, "groups[1].name"},
		{`groups: [{name: a, max_open_fraction: 0.5}]`, "groups[0].match"},
		{`groups: [{name: a, match: "[", max_open_fraction: 0.5}]`, "groups[0].match"},
		{`groups: [{name: a, match: "a*"}]`, "groups[0].max_open_fraction"},
		{`groups: [{name: a, match: "a*", max_open_fraction: 0}]`, "groups[0].max_open_fraction"},
		{`groups: [{name: a, match: "a*", max_open_fraction: -0.5}]`, "groups[0].max_open_fraction"},
		{`groups: [{name: a, match: "a*", max_open_fraction: 1.01}]`, "groups[0].max_open_fraction"},
		{`groups: [{name: a, match: "a*", max_open_fraction: 0.0000001}]`, "groups[0].max_open_fraction"},
		{`groups: [{name: a, match: "a*", max_open_fraction: .nan}]`, "groups[0].max_open_fraction"},
		{`groups: [{name: a, match: "a*", max_open_fraction: 0.5, max_open: 3}]`, "max_open"},
	} {
		_, err := Parse([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: error %v, want one naming %s", c.yaml, err, c.field)
		}
	}
}

func TestWarningsNameShadowedGroups(t *testing.T) {
	s, err := Parse([]byte(`
groups:
  - {name: all-search, match: "search:*", max_open_fraction: 0.5}
  - {name: web, match: "search:web*", max_open_fraction: 0.2}
  - {name: other, match: "stripe:*", max_open_fraction: 0.2}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`groups[1] (match "search:web*") is shadowed by groups[0] (match "search:*"), which matches first: "search:web*" is never in groups[1]`}
	if diff := cmp.Diff(want, s.Warnings()); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}
