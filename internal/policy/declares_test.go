package policy

import "testing"

// TestDeclares: a breaker is declared by a rule matching its exact name or
// by a group listing it; a glob rule, which matches names any worker can
// make up, declares none.
func TestDeclares(t *testing.T) {
	s, err := Parse([]byte(`
breakers:
  - {match: "stripe:charges", threshold: 3}
  - {match: "search:*", threshold: 4}
groups:
  - {name: pay, members: [pay:refunds], max_open_fraction: 0.5}
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"stripe:charges": true, "pay:refunds": true,
		"search:*": false, "search:web": false, "!flood-001": false,
	} {
		if got := s.Declares(name); got != want {
			t.Errorf("Declares(%q) = %v, want %v", name, got, want)
		}
	}
}
