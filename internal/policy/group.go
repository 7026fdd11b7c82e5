package policy

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/breakerd/breakerd/internal/limits"
)

// Group is a group of breakers under one open-fraction cap (a policy
// file's groups; internal/breaker/cap.go states the rule): when a trip
// would leave more than MaxOpenFraction of the group's members open, it is
// recorded and alerted (open_fraction_cap) but not enforced.
type Group struct {
	// Name names the group in its Redis keys (brk:grp:{<name>}:known and
	// :open), events, metrics and breakerctl: letters, digits and "_.:-",
	// at most 64 characters.
	Name string
	// Members are the group's breakers, by exact name: the share the cap
	// bounds is a share of them. A breaker is in at most one group. A name
	// no group lists is in none, so a worker cannot add members (nor open
	// ones) by naming breakers.
	Members []string
	// MaxOpenFraction is in (0, 1]; 1 never caps. It is read to six
	// decimal places (MaxOpenPPM).
	MaxOpenFraction float64
}

// MaxOpenPPM is MaxOpenFraction in millionths, rounded: what the scripts
// compare in integers (breaker.Params.MaxOpenPPM).
func (g Group) MaxOpenPPM() int64 { return int64(math.Round(g.MaxOpenFraction * 1e6)) }

// GroupOf returns the group that lists the named breaker among its
// members; false when none does.
func (s *Set) GroupOf(breaker string) (Group, bool) {
	i, ok := s.memberOf[breaker]
	if !ok {
		return Group{}, false
	}
	return s.groups[i], true
}

// Groups returns the groups, in file order.
func (s *Set) Groups() []Group { return s.groups }

// groupFile is one entry of the file's groups.
type groupFile struct {
	Name    string   `yaml:"name"`
	Members []string `yaml:"members"`
	// Match is read only to warn (groupPatterns): a pattern would let any
	// name join the group.
	Match           string   `yaml:"match"`
	MaxOpenFraction *float64 `yaml:"max_open_fraction"`
}

// parseGroups validates the file's groups; every error names its field
// (groups[1].max_open_fraction, groups[0].members[2]).
func parseGroups(in []groupFile) ([]Group, error) {
	var out []Group
	seen := map[string]int{}
	member := map[string]int{} // a breaker's group, by index
	for i, g := range in {
		at := fmt.Sprintf("groups[%d]", i)
		if err := groupName(at, g.Name, seen); err != nil {
			return nil, err
		}
		seen[g.Name] = i
		if g.Match != "" && len(g.Members) == 0 {
			continue // no members: it caps nothing (groupPatterns warns)
		}
		if err := groupMembers(at, g.Members, member, i); err != nil {
			return nil, err
		}
		f, err := groupFraction(at, g.MaxOpenFraction)
		if err != nil {
			return nil, err
		}
		out = append(out, Group{Name: g.Name, Members: g.Members, MaxOpenFraction: f})
	}
	return out, nil
}

// groupName checks a group's name at at, seen holding the names before it.
func groupName(at, name string, seen map[string]int) error {
	switch {
	case name == "":
		return fieldErr(at+".name", "is required")
	case len(name) > 64 || strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.:-", r))
	}) >= 0:
		return fieldErr(at+".name", "%q: use at most 64 letters, digits and _.:-", name)
	}
	if j, dup := seen[name]; dup {
		return fieldErr(at+".name", "%q is also groups[%d]'s name", name, j)
	}
	return nil
}

// groupMembers checks group i's members at at: at least one, each a
// breaker name, in no group before (member maps each name seen to its
// group); it adds them to member.
func groupMembers(at string, members []string, member map[string]int, i int) error {
	if len(members) == 0 {
		return fieldErr(at+".members", "is required: the group's breakers, by name")
	}
	for k, m := range members {
		field := fmt.Sprintf("%s.members[%d]", at, k)
		var le *limits.FieldError
		if err := limits.Name("breaker", m); errors.As(err, &le) {
			return fieldErr(field, "%s", le.Problem)
		}
		if j, dup := member[m]; dup {
			return fieldErr(field, "%q is also listed in groups[%d] (a breaker is in at most one group)", m, j)
		}
		member[m] = i
	}
	return nil
}

// groupFraction checks a group's max_open_fraction at at.
func groupFraction(at string, v *float64) (float64, error) {
	if v == nil {
		return 0, fieldErr(at+".max_open_fraction", "is required")
	}
	f := *v
	if math.IsNaN(f) || f <= 0 || f > 1 {
		return 0, fieldErr(at+".max_open_fraction", "must be in (0, 1], got %v", f)
	}
	if math.Round(f*1e6) < 1 {
		return 0, fieldErr(at+".max_open_fraction", "must be at least 0.000001, got %v", f)
	}
	return f, nil
}

// groupPatterns returns the warnings for the groups that give a match
// pattern: it is ignored, and a group with no members caps nothing.
func groupPatterns(in []groupFile) []string {
	var out []string
	for i, g := range in {
		if g.Match == "" {
			continue
		}
		effect := "it is ignored"
		if len(g.Members) == 0 {
			effect = "the group has no members and caps nothing"
		}
		out = append(out, fmt.Sprintf("groups[%d].match %q: a group lists its breakers by name in members (a pattern would let a worker add members, and open ones, by naming breakers); %s",
			i, g.Match, effect))
	}
	return out
}

// indexMembers maps each member of groups to its group's index.
func indexMembers(groups []Group) map[string]int {
	out := map[string]int{}
	for i, g := range groups {
		for _, m := range g.Members {
			if _, dup := out[m]; !dup {
				out[m] = i
			}
		}
	}
	return out
}

// WithGroups returns a copy of s whose groups are groups (in that order),
// not validated (a breaker listed twice is in the first group that lists
// it): Parse validates a file's. For tests and embedders that
// build a Set in code.
func (s *Set) WithGroups(groups ...Group) *Set {
	c := *s
	c.groups = append([]Group(nil), groups...)
	c.memberOf = indexMembers(c.groups)
	return &c
}
