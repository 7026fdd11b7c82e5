// Package replay re-runs one tool-vendor outage against a real breakerd:
// a fake search vendor on loopback that fails for the outage's length, a
// scripted fake model that calls it, and five ways of guarding the calls
// (no breaker, two per-run breakers, two fleet-wide breakerd breakers),
// plus, when asked, arm 4 with a recovery check (6), counting the failure
// rate in a window (7) or counting slow calls in a slow outage (8), with
// time scaled down. Every number it reports is counted where it
// happened: requests at the fake vendor, RPCs and decisions at breakerd.
package replay

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/breakerd/breakerd/internal/policy"
)

// Config is one replay. Every duration is in incident time (what a wall
// clock showed during the incident); the replay divides each by Scale.
// Default returns the incident's figures.
type Config struct {
	// Runs is how many agent runs arrive, evenly spaced, over the outage.
	// Default 340.
	Runs int
	// Outage is how long the vendor fails every request. Default 22m
	// (09:12 to 09:34).
	Outage time.Duration
	// ArriveWithin is the span, from the outage's start, over which the
	// Runs arrive evenly. Default 0: the outage less one failing run's
	// length (15m12s for the incident: 22m less 6.8m), so that every run
	// fails through as all 340 did in the incident (340 × 11 calls,
	// 340 × $1.20). Set it to the outage's length to spread the runs over
	// all of it, where the last ones find the vendor back.
	ArriveWithin time.Duration
	// Steps is the model's step budget per run. Default 20.
	Steps int
	// SearchStep is the first step at which the model calls web_search.
	// Default 4.
	SearchStep int
	// LastSearchStep is the last step at which a model that has neither
	// results nor a notice calls web_search again (with a new phrasing);
	// its remaining steps, to the budget, go to an answer without results.
	// Default 14 (the incident's runs called through step 14).
	LastSearchStep int
	// Attempts is how many HTTP attempts one web_search call makes before
	// it fails. Default 5.
	Attempts int
	// CallTime is how long a failing web_search call takes, its attempts
	// evenly spaced over it. Default 31s.
	CallTime time.Duration
	// StepTime is how long one model step takes. Default 3.35s, so that a
	// run that fails through (20 steps, 11 calls) lasts 6.8 minutes.
	StepTime time.Duration
	// StepPrice is the model spend per step, in dollars. Default 0.06 (20
	// steps: $1.20).
	StepPrice float64
	// Threshold is the consecutive failures that open a breaker (per-run
	// and fleet-wide). Default 5.
	Threshold int
	// Quorum is how many distinct workers the fleet breaker's failures must
	// come from (breakerd's min_workers). Default 2.
	Quorum int
	// CooldownBase is the first open period; each failed probe doubles it
	// up to CooldownCap. Defaults 30s and 15m.
	CooldownBase time.Duration
	CooldownCap  time.Duration
	// Jitter is breakerd's jitter fraction added to fleet cooldowns.
	// Default 0.2.
	Jitter float64
	// ProbeTimeout is the fleet probe's lease. Default 60s: it must exceed
	// CallTime, or a failing probe's lease lapses before it records and a
	// second probe goes out (breakerd's own default, 30s, is shorter than
	// this vendor's 31s calls).
	ProbeTimeout time.Duration
	// Workers is how many worker ids the fleet arms spread their runs over.
	// Default 8.
	Workers int
	// Tail bounds how long runs keep arriving, at the same rate, after the
	// vendor recovers, until each fleet arm's breaker closes. Default 20m
	// (more than the 15m cooldown cap plus its jitter).
	Tail time.Duration
	// Scale divides every duration. Default 60: the incident's 22 minutes
	// take 22 seconds, and the whole replay under a minute.
	Scale float64
	// Addr is an external breakerd's address. Empty: an in-process daemon
	// on RedisURL.
	Addr string
	// RedisURL is the Redis of the in-process daemon. Empty: an embedded
	// in-memory Redis. Ignored with Addr.
	RedisURL string
	// RecoveryCheck, when positive, gives the fake vendor a cheap status
	// endpoint that follows the outage (503 during it, 200 after) and adds
	// arm 6: arm 4 with a recovery check of that endpoint every
	// RecoveryCheck (breakerd's recovery_check_interval). 0: no arm 6.
	// Needs the in-process daemon (no Addr).
	RecoveryCheck time.Duration
	// FailRate is the share of web_search calls that fail during the
	// outage, each call whole (all its attempts fail, or its first
	// succeeds), decided by its run and call number so that every arm
	// sees the same calls fail. Default 1: the vendor fails every request,
	// as in the incident. Below 1 it is a partial outage, the kind a
	// consecutive-failure breaker rarely trips on.
	FailRate float64
	// Window, when positive, adds arm 7: arm 4 with a failure-rate window
	// (breakerd's mode: window) of this length, tripping at WindowRate over
	// at least WindowMinCalls calls. Divided by Scale it must be within
	// breakerd's window bounds (6s to 24h): at the default scale, at least
	// 6m. 0: no arm 7.
	Window time.Duration
	// WindowRate is arm 7's failure_rate. Default 0.25.
	WindowRate float64
	// WindowMinCalls is arm 7's min_calls. Default 10.
	WindowMinCalls int
	// SlowOutage, when positive, makes the outage a slow one: the vendor
	// answers every web_search call during it, each after SlowOutage
	// (incident time) rather than failing, and adds arm 8: arm 4
	// counting slow calls (breakerd's slow_call: SlowCall, and
	// slow_call_threshold: Threshold). 0: the vendor fails (FailRate).
	SlowOutage time.Duration
	// SlowCall is arm 8's slow_call, incident time: a success that took
	// longer is slow. Default 2s.
	SlowCall time.Duration
	// sweep runs only arms 4 and 6 (Sweep).
	sweep bool
}

// Default returns the incident's figures.
func Default() Config {
	return Config{
		Runs:           340,
		Outage:         22 * time.Minute,
		Steps:          20,
		SearchStep:     4,
		LastSearchStep: 14,
		Attempts:       5,
		CallTime:       31 * time.Second,
		StepTime:       3350 * time.Millisecond,
		StepPrice:      0.06,
		Threshold:      5,
		Quorum:         2,
		CooldownBase:   30 * time.Second,
		CooldownCap:    15 * time.Minute,
		Jitter:         0.2,
		ProbeTimeout:   60 * time.Second,
		Workers:        8,
		Tail:           20 * time.Minute,
		Scale:          60,
		FailRate:       1,
		WindowRate:     0.25,
		WindowMinCalls: 10,
		SlowCall:       2 * time.Second,
	}
}

// Validate reports the first invalid field, named as its flag.
func (c Config) Validate() error {
	switch {
	case c.Runs < 1:
		return fmt.Errorf("--runs: must be at least 1, got %d", c.Runs)
	case c.Outage <= 0:
		return fmt.Errorf("--outage: must be positive, got %s", c.Outage)
	case c.ArriveWithin < 0 || c.ArriveWithin > c.Outage:
		return fmt.Errorf("--arrive-within: must be between 0 and --outage (%s), got %s", c.Outage, c.ArriveWithin)
	case c.Steps < 2:
		return fmt.Errorf("--steps: must be at least 2, got %d", c.Steps)
	case c.SearchStep < 1 || c.SearchStep > c.Steps:
		return fmt.Errorf("--search-step: must be between 1 and --steps (%d), got %d", c.Steps, c.SearchStep)
	case c.LastSearchStep < c.SearchStep || c.LastSearchStep > c.Steps:
		return fmt.Errorf("--last-search-step: must be between --search-step (%d) and --steps (%d), got %d", c.SearchStep, c.Steps, c.LastSearchStep)
	case c.Attempts < 1:
		return fmt.Errorf("--attempts: must be at least 1, got %d", c.Attempts)
	case c.CallTime <= 0:
		return fmt.Errorf("--call-time: must be positive, got %s", c.CallTime)
	case c.StepTime <= 0:
		return fmt.Errorf("--step-time: must be positive, got %s", c.StepTime)
	case c.StepPrice < 0:
		return fmt.Errorf("--step-price: must not be negative, got %g", c.StepPrice)
	case c.Threshold < 1:
		return fmt.Errorf("--threshold: must be at least 1, got %d", c.Threshold)
	case c.Quorum < 1:
		return fmt.Errorf("--quorum: must be at least 1, got %d", c.Quorum)
	case c.Workers < c.Quorum:
		return fmt.Errorf("--workers: must be at least --quorum (%d), got %d", c.Quorum, c.Workers)
	case !(c.Jitter >= 0 && c.Jitter <= 1):
		return fmt.Errorf("--jitter: must be between 0 and 1, got %g", c.Jitter)
	case c.Tail < 0:
		return fmt.Errorf("--tail: must not be negative, got %s", c.Tail)
	case !(c.Scale >= 1):
		return fmt.Errorf("--scale: must be at least 1, got %g", c.Scale)
	case c.CooldownCap < c.CooldownBase:
		return fmt.Errorf("--cooldown-cap: must be at least --cooldown (%s), got %s", c.CooldownBase, c.CooldownCap)
	case c.scaled(c.CooldownBase) < time.Millisecond:
		return fmt.Errorf("--cooldown: %s divided by --scale %g is under breakerd's 1ms minimum", c.CooldownBase, c.Scale)
	case c.scaled(c.ProbeTimeout) < time.Millisecond:
		return fmt.Errorf("--probe-timeout: %s divided by --scale %g is under breakerd's 1ms minimum", c.ProbeTimeout, c.Scale)
	case c.scaled(c.ProbeTimeout) > time.Hour:
		return fmt.Errorf("--probe-timeout: %s divided by --scale %g is over breakerd's 1h maximum", c.ProbeTimeout, c.Scale)
	case c.RecoveryCheck < 0:
		return fmt.Errorf("--recovery-check: must not be negative, got %s", c.RecoveryCheck)
	case c.RecoveryCheck > 0 && c.scaled(c.RecoveryCheck) < policy.MinRecoveryCheckInterval:
		return fmt.Errorf("--recovery-check: %s divided by --scale %g is under breakerd's %s minimum", c.RecoveryCheck, c.Scale, policy.MinRecoveryCheckInterval)
	case !(c.FailRate > 0 && c.FailRate <= 1):
		return fmt.Errorf("--fail-rate: must be more than 0 and at most 1, got %g", c.FailRate)
	case c.Window < 0:
		return fmt.Errorf("--window: must not be negative, got %s", c.Window)
	case c.Window > 0 && (c.scaled(c.Window) < policy.MinWindow || c.scaled(c.Window) > policy.MaxWindow):
		return fmt.Errorf("--window: %s divided by --scale %g is outside breakerd's window bounds (%s to %s)", c.Window, c.Scale, policy.MinWindow, policy.MaxWindow)
	case c.Window > 0 && !(c.WindowRate > 0 && c.WindowRate <= 1):
		return fmt.Errorf("--window-rate: must be more than 0 and at most 1, got %g", c.WindowRate)
	case c.Window > 0 && c.WindowMinCalls < 2:
		return fmt.Errorf("--window-min-calls: must be at least 2, got %d", c.WindowMinCalls)
	case c.SlowOutage < 0:
		return fmt.Errorf("--slow-outage: must not be negative, got %s", c.SlowOutage)
	case c.SlowOutage > 0 && c.FailRate < 1:
		return fmt.Errorf("--slow-outage: a slow outage answers every call; it cannot be combined with --fail-rate %g", c.FailRate)
	case c.SlowOutage > 0 && c.scaledMs(c.SlowCall) < 1:
		return fmt.Errorf("--slow-call: %s divided by --scale %g is under breakerd's 1ms", c.SlowCall, c.Scale)
	case c.SlowOutage > 0 && c.SlowOutage <= c.SlowCall:
		return fmt.Errorf("--slow-outage: %s is not slower than --slow-call %s: arm 8 would count nothing", c.SlowOutage, c.SlowCall)
	case c.RecoveryCheck > 0 && c.Addr != "":
		return fmt.Errorf("--recovery-check: needs the in-process daemon (no --addr): an external daemon's policy cannot name this replay's vendor")
	}
	return nil
}

// scaled is d in replay (wall-clock) time.
func (c Config) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.Scale)
}

// scaledMs is d in replay time, in whole milliseconds (rounded down: a
// policy's slow_call is a whole number of milliseconds).
func (c Config) scaledMs(d time.Duration) int64 { return c.scaled(d).Milliseconds() }

// interval is the time between two runs' arrivals.
func (c Config) interval() time.Duration {
	return c.Arrivals() / time.Duration(c.Runs)
}

// Arrivals is the span over which the runs arrive: ArriveWithin, or by
// default the outage less one failing run's length (the whole outage when
// a run outlasts it).
func (c Config) Arrivals() time.Duration {
	if c.ArriveWithin > 0 {
		return c.ArriveWithin
	}
	searches := time.Duration(c.LastSearchStep - c.SearchStep + 1)
	run := time.Duration(c.Steps)*c.StepTime + searches*c.CallTime
	if run >= c.Outage {
		return c.Outage
	}
	return c.Outage - run
}

// NamePrefix starts the name of every breaker a replay uses; the policy
// from PolicyYAML applies to these names only.
const NamePrefix = "outage-replay:"

// PolicyYAML is the breakerd policy file the fleet arms need: the
// threshold, quorum, jitter, and the cooldowns and probe lease divided by
// Scale, for every breaker whose name starts with NamePrefix. The
// in-process daemon runs with it; an external daemon must be started with
// it (--config) for its breakers to behave like the incident's.
func (c Config) PolicyYAML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# breakerd policy for outage-replay at --scale %g: cooldowns and the probe\n", c.Scale)
	fmt.Fprintf(&b, "# lease are the incident's (%s doubling to %s, probe lease %s) divided by %g.\n", c.CooldownBase, c.CooldownCap, c.ProbeTimeout, c.Scale)
	b.WriteString("breakers:\n")
	if c.Window > 0 {
		// First: the first rule that matches a name wins.
		fmt.Fprintf(&b, "  # arm 7: the failure rate over a window of %s (incident time), not consecutive failures\n", c.Window)
		c.writeWindowRule(&b, NamePrefix+"*:"+armTag(ArmFleetWindow)+":*")
	}
	if c.SlowOutage > 0 {
		fmt.Fprintf(&b, "  # arm 8: slow calls (over %s, incident time) counted besides failures\n", c.SlowCall)
		c.writeRule(&b, NamePrefix+"*:"+armTag(ArmFleetSlow)+":*")
		fmt.Fprintf(&b, "    slow_call: %dms\n", c.scaledMs(c.SlowCall))
		fmt.Fprintf(&b, "    slow_call_threshold: %d\n", c.Threshold)
	}
	c.writeRule(&b, NamePrefix+"*")
	return b.String()
}

// writeWindowRule writes arm 7's rule: the replay's quorum, cooldowns and
// probe lease, counting by the failure rate over Window.
func (c Config) writeWindowRule(b *strings.Builder, match string) {
	fmt.Fprintf(b, "  - match: %q\n", match)
	fmt.Fprintf(b, "    mode: window\n")
	fmt.Fprintf(b, "    window: %s\n", c.scaled(c.Window))
	fmt.Fprintf(b, "    failure_rate: %g\n", c.WindowRate)
	fmt.Fprintf(b, "    min_calls: %d\n", c.WindowMinCalls)
	c.writeShared(b)
}

// writeRule writes the replay's policy rule for the breakers matching
// match: the incident's threshold and quorum, its cooldowns and probe
// lease scaled.
func (c Config) writeRule(b *strings.Builder, match string) {
	fmt.Fprintf(b, "  - match: %q\n", match)
	fmt.Fprintf(b, "    threshold: %d\n", c.Threshold)
	c.writeShared(b)
}

// writeShared writes the fields every replay rule has: the quorum, the
// cooldowns and probe lease scaled, the jitter.
func (c Config) writeShared(b *strings.Builder) {
	fmt.Fprintf(b, "    min_workers: %d\n", c.Quorum)
	fmt.Fprintf(b, "    cooldown_base: %s\n", c.scaled(c.CooldownBase))
	fmt.Fprintf(b, "    cooldown_cap: %s\n", c.scaled(c.CooldownCap))
	fmt.Fprintf(b, "    jitter: %g\n", c.Jitter)
	fmt.Fprintf(b, "    probe_timeout: %s\n", c.scaled(c.ProbeTimeout))
}

// checkPolicyYAML is PolicyYAML with, first, a rule for the check arm's
// breakers (those under armPrefix): the same policy plus a recovery check
// of statusURL every RecoveryCheck (scaled), its timeout half of that.
func (c Config) checkPolicyYAML(armPrefix, statusURL string) string {
	base := c.PolicyYAML()
	i := strings.Index(base, "breakers:\n") + len("breakers:\n")
	var b strings.Builder
	b.WriteString(base[:i])
	c.writeRule(&b, armPrefix+"*")
	fmt.Fprintf(&b, "    recovery_check_interval: %s\n", c.scaled(c.RecoveryCheck))
	fmt.Fprintf(&b, "    recovery_check:\n      http: {method: GET, url: %q, expect_status: 200}\n      timeout: %s\n",
		statusURL, c.scaled(c.RecoveryCheck)/2)
	b.WriteString(base[i:])
	return b.String()
}

// errPolicy marks a replay whose external daemon's policy is not the one
// PolicyYAML gives.
var errPolicy = errors.New("the daemon's policy for " + NamePrefix + "* breakers is not the replay's")
