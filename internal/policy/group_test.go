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
    members: [web_search, news_search]
    max_open_fraction: 0.5
  - name: pay
    members: [stripe]
    max_open_fraction: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"web_search": "search", "news_search": "search", "stripe": "pay"} {
		g, ok := s.GroupOf(name)
		if !ok || g.Name != want {
			t.Errorf("GroupOf(%q) = %+v %v, want %q", name, g, ok, want)
		}
	}
	// Only a listed name is a member: no pattern, no prefix.
	for _, name := range []string{"image_search", "web_search2", "stripe:refund", ""} {
		if g, ok := s.GroupOf(name); ok {
			t.Errorf("GroupOf(%q) = %+v, want no group (not listed)", name, g)
		}
	}
	if g, _ := s.GroupOf("web_search"); g.MaxOpenFraction != 0.5 || g.MaxOpenPPM() != 500_000 || len(g.Members) != 2 {
		t.Errorf("search: %+v ppm %d, want 0.5 = 500000 ppm and 2 members", g, g.MaxOpenPPM())
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
		{`groups: [{members: [a], max_open_fraction: 0.5}]`, "groups[0].name"},
		{`groups: [{name: "a b", members: [a], max_open_fraction: 0.5}]`, "groups[0].name"},
		{`groups: [{name: "a{b}", members: [a], max_open_fraction: 0.5}]`, "groups[0].name"},
		{`groups: [{name: a, members: [a], max_open_fraction: 0.5}, {name: a, members: [b], max_open_fraction: 0.5}]`, "groups[1].name"},
		{`groups: [{name: a, max_open_fraction: 0.5}]`, "groups[0].members"},
		{`groups: [{name: a, members: [], max_open_fraction: 0.5}]`, "groups[0].members"},
		{`groups: [{name: a, members: [x, ""], max_open_fraction: 0.5}]`, "groups[0].members[1]"},
		{`groups: [{name: a, members: [" x"], max_open_fraction: 0.5}]`, "groups[0].members[0]"},
		{`groups: [{name: a, members: [x, y], max_open_fraction: 0.5}, {name: b, members: [z, x], max_open_fraction: 0.5}]`, "groups[1].members[1]"},
		{`groups: [{name: a, members: [x, x], max_open_fraction: 0.5}]`, "groups[0].members[1]"},
		{`groups: [{name: a, members: [a]}]`, "groups[0].max_open_fraction"},
		{`groups: [{name: a, members: [a], max_open_fraction: 0}]`, "groups[0].max_open_fraction"},
		{`groups: [{name: a, members: [a], max_open_fraction: -0.5}]`, "groups[0].max_open_fraction"},
		{`groups: [{name: a, members: [a], max_open_fraction: 1.01}]`, "groups[0].max_open_fraction"},
		{`groups: [{name: a, members: [a], max_open_fraction: 0.0000001}]`, "groups[0].max_open_fraction"},
		{`groups: [{name: a, members: [a], max_open_fraction: .nan}]`, "groups[0].max_open_fraction"},
		{`groups: [{name: a, members: [a], max_open_fraction: 0.5, max_open: 3}]`, "max_open"},
	} {
		_, err := Parse([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: error %v, want one naming %s", c.yaml, err, c.field)
		}
	}
}

// A group's match pattern is ignored with a warning: a group with no
// members caps nothing, and no name joins a group by matching it.
func TestWarningsNameGroupPatterns(t *testing.T) {
	s, err := Parse([]byte(`
groups:
  - {name: search, match: "*_search", max_open_fraction: 0.5}
  - {name: pay, match: "stripe:*", members: [stripe], max_open_fraction: 0.5}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`groups[0].match "*_search": a group lists its breakers by name in members (a pattern would let a worker add members, and open ones, by naming breakers); the group has no members and caps nothing`,
		`groups[1].match "stripe:*": a group lists its breakers by name in members (a pattern would let a worker add members, and open ones, by naming breakers); it is ignored`,
	}
	if diff := cmp.Diff(want, s.Warnings()); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	for name, want := range map[string]bool{"web_search": false, "stripe:refund": false, "stripe": true} {
		if _, ok := s.GroupOf(name); ok != want {
			t.Errorf("GroupOf(%q) in a group = %v, want %v", name, ok, want)
		}
	}
}
