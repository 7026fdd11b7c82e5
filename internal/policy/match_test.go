package policy

import (
	"fmt"
	"testing"
)

// TestForAnswersTheSameAfterItRemembers: For remembers which rule each
// breaker matched; a breaker asked again, and breakers past the memory's
// bound, get the policy of the first rule that matches, as the first
// time.
func TestForAnswersTheSameAfterItRemembers(t *testing.T) {
	s, err := Parse([]byte(`
breakers:
  - match: "pay-*"
    threshold: 3
  - match: "pay-eu-*"
    threshold: 7
  - match: "search-?"
    threshold: 9
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"pay-eu-1": 3, "search-a": 9, "search-ab": Default().Threshold, "other": Default().Threshold}
	for round := range 2 {
		for name, th := range want {
			if got := s.For(name).Threshold; got != th {
				t.Errorf("round %d: For(%q).Threshold = %d, want %d", round, name, got, th)
			}
		}
	}
	for i := range matchMemoMax + 10 {
		name := fmt.Sprintf("pay-%d", i)
		if got := s.For(name).Threshold; got != 3 {
			t.Fatalf("For(%q).Threshold = %d, want 3 (the first rule)", name, got)
		}
	}
	if n := len(s.matched.by); n != matchMemoMax {
		t.Errorf("remembered %d breakers, want at most %d", n, matchMemoMax)
	}
	if got := s.For("search-b").Threshold; got != 9 {
		t.Errorf("past the bound: For(%q).Threshold = %d, want 9", "search-b", got)
	}
}
