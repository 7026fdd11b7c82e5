package policy

import (
	"fmt"
	"math"
	"path"
	"strings"
)

// Group is a group of breakers under one open-fraction cap (a policy
// file's groups; internal/breaker/cap.go states the rule): when a trip
// would leave more than MaxOpenFraction of the group's known breakers
// open, it is recorded and alerted (open_fraction_cap) but not enforced.
type Group struct {
	// Name names the group in its Redis keys (brk:grp:{<name>}:known and
	// :open), events, metrics and breakerctl: letters, digits and "_.:-",
	// at most 64 characters.
	Name string
	// Match is the Go path.Match glob of the breakers in the group; a
	// breaker belongs to the first group that matches it.
	Match string
	// MaxOpenFraction is in (0, 1]; 1 never caps. It is read to six
	// decimal places (MaxOpenPPM).
	MaxOpenFraction float64
}

// MaxOpenPPM is MaxOpenFraction in millionths, rounded: what the scripts
// compare in integers (breaker.Params.MaxOpenPPM).
func (g Group) MaxOpenPPM() int64 { return int64(math.Round(g.MaxOpenFraction * 1e6)) }

// GroupOf returns the group the named breaker belongs to: the first group
// whose match is a match; false when none is.
func (s *Set) GroupOf(breaker string) (Group, bool) {
	for _, g := range s.groups {
		if ok, _ := path.Match(g.Match, breaker); ok {
			return g, true
		}
	}
	return Group{}, false
}

// Groups returns the groups, in file order.
func (s *Set) Groups() []Group { return s.groups }

// groupFile is one entry of the file's groups.
type groupFile struct {
	Name            string   `yaml:"name"`
	Match           string   `yaml:"match"`
	MaxOpenFraction *float64 `yaml:"max_open_fraction"`
}

// parseGroups validates the file's groups; every error names its field
// (groups[1].max_open_fraction).
func parseGroups(in []groupFile) ([]Group, error) {
	var out []Group
	seen := map[string]int{}
	for i, g := range in {
		at := fmt.Sprintf("groups[%d]", i)
		switch {
		case g.Name == "":
			return nil, fieldErr(at+".name", "is required")
		case len(g.Name) > 64 || strings.IndexFunc(g.Name, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.:-", r))
		}) >= 0:
			return nil, fieldErr(at+".name", "%q: use at most 64 letters, digits and _.:-", g.Name)
		}
		if j, dup := seen[g.Name]; dup {
			return nil, fieldErr(at+".name", "%q is also groups[%d]'s name", g.Name, j)
		}
		seen[g.Name] = i
		if g.Match == "" {
			return nil, fieldErr(at+".match", "is required")
		}
		if _, err := path.Match(g.Match, ""); err != nil {
			return nil, fieldErr(at+".match", "bad pattern %q: %v", g.Match, err)
		}
		if g.MaxOpenFraction == nil {
			return nil, fieldErr(at+".max_open_fraction", "is required")
		}
		f := *g.MaxOpenFraction
		if math.IsNaN(f) || f <= 0 || f > 1 {
			return nil, fieldErr(at+".max_open_fraction", "must be in (0, 1], got %v", f)
		}
		if math.Round(f*1e6) < 1 {
			return nil, fieldErr(at+".max_open_fraction", "must be at least 0.000001, got %v", f)
		}
		out = append(out, Group{Name: g.Name, Match: g.Match, MaxOpenFraction: f})
	}
	return out, nil
}

// groupOverlaps returns the warnings for groups as overlaps does for
// rules: each later group whose match, read as a name, an earlier group's
// match matches (the first group that matches wins).
func groupOverlaps(groups []Group) []string {
	var out []string
	for _, sh := range shadowed(len(groups), func(i int) string { return groups[i].Match }) {
		later, earlier := groups[sh.later].Match, groups[sh.earlier].Match
		out = append(out, fmt.Sprintf("groups[%d] (match %q) is shadowed by groups[%d] (match %q), which matches first: %q is never in groups[%d]",
			sh.later, later, sh.earlier, earlier, later, sh.later))
	}
	return out
}

// WithGroups returns a copy of s whose groups are groups (in that order),
// not validated: Parse validates a file's. For tests and embedders that
// build a Set in code.
func (s *Set) WithGroups(groups ...Group) *Set {
	c := *s
	c.groups = append([]Group(nil), groups...)
	return &c
}
