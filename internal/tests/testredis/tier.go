package testredis

import (
	"os"
	"slices"
	"strings"
	"testing"
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
