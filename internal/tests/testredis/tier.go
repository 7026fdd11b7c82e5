package testredis

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// EnvTiers names the environment variable that turns on the heavy test
// tiers, comma-separated ("replay,failover"): experiments that take
// minutes, not the seconds of a unit test. `go test ./...` without it is
// the unit tier; scripts/test.sh's go phase runs each heavy tier after it,
// by name, and CONTRIBUTING.md lists them with their times.
const EnvTiers = "BREAKERD_TEST_TIERS"

// Tier skips t unless EnvTiers names tier, saying how to run it.
func Tier(t testing.TB, tier string) {
	t.Helper()
	if TierOn(tier) {
		return
	}
	t.Skipf("the %s tier is off: %s=%s go test -run '^%s$' runs it here; scripts/test.sh go runs every tier",
		tier, EnvTiers, tier, strings.SplitN(t.Name(), "/", 2)[0])
}

// TierOn reports whether EnvTiers names tier: for a test whose unit-tier
// run is a short form of a heavier one.
func TierOn(tier string) bool {
	return slices.Contains(strings.Split(os.Getenv(EnvTiers), ","), tier)
}

// UntilDeadline is the context for a test's waits on conditions: it ends
// a minute before t's deadline (so that a wait which runs out still
// reports before go test's timeout panics), or with t when go test has
// no timeout. A busy host then stretches the waits, not the failures.
func UntilDeadline(t *testing.T) context.Context {
	d, ok := t.Deadline()
	if !ok {
		return t.Context()
	}
	ctx, cancel := context.WithDeadline(t.Context(), d.Add(-time.Minute))
	t.Cleanup(cancel)
	return ctx
}
