package daemon

import (
	"fmt"
	"io"

	"github.com/breakerd/breakerd/internal/limits"
)

// CheckConfig is breakerd --check-config FILE [NAME...]: it reads and
// validates the policy file at path as the daemon would at start, prints
// its warnings (rules an earlier rule shadows) and, for each name, the
// rule that applies, the effective policy and its open-fraction group,
// then returns. It opens no
// port and no Redis. The error is the first invalid field (named as in
// the file) or an invalid breaker name; warnings are not errors.
func CheckConfig(path string, names []string, stdout io.Writer) error {
	for i, n := range names {
		if err := limits.Name(fmt.Sprintf("NAME[%d]", i), n); err != nil {
			return err
		}
	}
	set, _, err := readPolicy(path)
	if err != nil {
		return err
	}
	for _, w := range set.Warnings() {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	for _, n := range names {
		fmt.Fprintf(stdout, "%s: %s\n", n, set.Source(n))
		for _, l := range set.For(n).Fields() {
			fmt.Fprintf(stdout, "  %s\n", l)
		}
		if g, ok := set.GroupOf(n); ok {
			fmt.Fprintf(stdout, "  group: %s (%d members, max_open_fraction: %v)\n", g.Name, len(g.Members), g.MaxOpenFraction)
		}
	}
	switch n := len(set.Warnings()); n {
	case 0:
		fmt.Fprintf(stdout, "%s: ok\n", path)
	case 1:
		fmt.Fprintf(stdout, "%s: ok, 1 warning\n", path)
	default:
		fmt.Fprintf(stdout, "%s: ok, %d warnings\n", path, n)
	}
	return nil
}
