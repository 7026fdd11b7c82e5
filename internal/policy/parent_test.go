package policy

import (
	"slices"
	"strings"
	"testing"
)

func TestParseParentScopes(t *testing.T) {
	s, err := Parse([]byte(`
breakers:
  - match: search-vendor
    threshold: 3
  - match: "*_search"
    parent: search-vendor
  - match: maps
    parent: search-vendor
    count_toward_parent: false
`))
	if err != nil {
		t.Fatal(err)
	}
	if p := s.For("web_search"); p.Parent != "search-vendor" || !p.CountTowardParent {
		t.Errorf("web_search: parent %q count %v, want search-vendor, true (the default)", p.Parent, p.CountTowardParent)
	}
	if p := s.For("maps"); p.Parent != "search-vendor" || p.CountTowardParent {
		t.Errorf("maps: parent %q count %v, want search-vendor, false", p.Parent, p.CountTowardParent)
	}
	if p := s.For("search-vendor"); p.Parent != "" || p.Threshold != 3 {
		t.Errorf("search-vendor: parent %q threshold %d, want none, 3 (its own policy)", p.Parent, p.Threshold)
	}
	if f := s.For("web_search").Fields(); !slices.Contains(f, "parent: search-vendor") || !slices.Contains(f, "count_toward_parent: true") {
		t.Errorf("Fields() = %v, want the parent and count_toward_parent", f)
	}
	if f := s.For("search-vendor").Fields(); slices.ContainsFunc(f, func(l string) bool { return strings.HasPrefix(l, "parent") }) {
		t.Errorf("Fields() of a breaker with no parent = %v, want no parent line", f)
	}
}

// A parent naming itself, a cycle, a grandparent and a bad name are
// errors naming the section's parent field; count_toward_parent with no
// parent is a warning.
func TestParseParentErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{`
breakers:
  - match: vendor
    parent: vendor
`, `breakers[0].parent: "vendor" would be its own parent`},
		{`
breakers:
  - match: "search:*"
    parent: "search:vendor"
`, `breakers[0].parent: "search:vendor" would be its own parent: its own policy (breakers[0] (match "search:*")) names it as parent`},
		{`
breakers:
  - match: a
    parent: b
  - match: b
    parent: a
`, `breakers[0].parent: a parent cycle: b -> a -> b`},
		{`
breakers:
  - match: tool
    parent: host
  - match: host
    parent: region
`, `breakers[0].parent: "host" has a parent of its own ("region", from breakers[1] (match "host")): parent scopes are one level deep`},
		{`
defaults:
  parent: vendor
`, `defaults.parent: "vendor" would be its own parent`},
		{`
breakers:
  - match: tool
    parent: " vendor"
`, `breakers[0].parent: must not start or end with white space`},
		{`
breakers:
  - match: tool
    count_toward_parent: maybe
`, `breakers[0].count_toward_parent: line 4: "maybe" is not true or false`},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", tc.yaml, err, tc.want)
		}
	}
	s, err := Parse([]byte(`
breakers:
  - match: tool
    count_toward_parent: false
`))
	if err != nil {
		t.Fatal(err)
	}
	want := "breakers[0].count_toward_parent is set but has no effect: no parent is set"
	if !slices.Contains(s.Warnings(), want) {
		t.Errorf("Warnings() = %q, want %q", s.Warnings(), want)
	}
}

// A parent that looks like a pattern is read literally, and said so once.
func TestParentThatLooksLikeAPatternIsWarnedOnce(t *testing.T) {
	s, err := Parse([]byte("breakers:\n  - match: \"a*\"\n    parent: \"vendor:*\"\n  - match: \"b*\"\n    parent: \"vendor:*\"\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	n := 0
	for _, w := range s.Warnings() {
		if strings.Contains(w, `"vendor:*" looks like a pattern`) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("warnings %q: want the pattern-like parent named once", s.Warnings())
	}
	if got := s.For("ab").Parent; got != "vendor:*" {
		t.Errorf("parent = %q, want it as written", got)
	}
}
