// Package policy holds the tunables of a breaker (threshold, quorum,
// cooldowns, jitter, probe timeout) and resolves them per breaker from a
// YAML file of defaults and glob-pattern overrides.
//
// The file's fields, defaults and warnings: docs/policies.md.
package policy

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/breakerd/breakerd/internal/classify"
	"github.com/breakerd/breakerd/internal/limits"
)

// Policy is the set of tunables that apply to one breaker. The zero value
// is not valid; start from Default and override.
type Policy struct {
	// Threshold is how many consecutive counted failures trip the circuit
	// (together with MinWorkers). Default 5; at least 1.
	Threshold int
	// MinWorkers is the quorum: how many distinct workers the consecutive
	// failures must come from before the circuit opens. Default 2; at
	// least 1 (1 disables the quorum).
	MinWorkers int
	// RateLimitTrips is how many consecutive RATE_LIMITED outcomes whose
	// Retry-After exceeds the caller's deadline open the circuit (quorum
	// still applies). Default 3; at least 1.
	RateLimitTrips int
	// BareRateLimitWait is the wait assumed for a rate limit that states
	// none (a 429 with no wait header, a gRPC RESOURCE_EXHAUSTED with no
	// RetryInfo) when the daemon classifies a Record's evidence: such a
	// rate limit counts when this exceeds the caller's remaining deadline.
	// Default 60s (classify.DefaultBareWait, also what 0 means); at most
	// 7 days.
	BareRateLimitWait time.Duration
	// CooldownBase is the first open period. Each failed probe doubles it,
	// up to CooldownCap. Default 30s.
	CooldownBase time.Duration
	// CooldownCap bounds the cooldown. Default 15m; at least CooldownBase.
	CooldownCap time.Duration
	// Jitter is the largest fraction of a cooldown added at random, so that
	// breakers opened in the same second do not probe in the same second.
	// Default 0.2 (up to 20% longer); 0 disables it; at most 1.
	Jitter float64
	// ProbeTimeout is how long a probe lease lasts: a prober that never
	// records frees the slot after this long. Default 30s.
	ProbeTimeout time.Duration
	// PauseTTL is how long a pause lasts (a working credential rejected
	// by min_workers workers) unless an operator resumes it first; a
	// pause_expiring alert is raised a quarter of it before it lapses.
	// Default 1h; from 1m to 7 days.
	PauseTTL time.Duration
	// Alternatives names tools or routes to offer the model while the
	// circuit is open. Optional.
	Alternatives []string

	// Mode is how failures are counted: "consecutive" (the default:
	// Threshold consecutive failures) or "window" (the failure rate over
	// Window; FailureRate and MinCalls apply, Threshold and RateLimitTrips
	// do not). Window mode writes on every call.
	Mode string
	// Window is the failure-rate window (window mode), kept in 6 buckets
	// of Window/6 each. Default 60s; from 6s to 24h.
	Window time.Duration
	// FailureRate is the share of a window's calls that must fail for it
	// to trip (window mode); exactly at the rate trips. Default 0.5; more
	// than 0, at most 1.
	FailureRate float64
	// MinCalls is how many calls a window must hold before its rate
	// counts (window mode). Default 10; at least 2, so that one failure
	// out of one call never trips.
	MinCalls int
	// SlowCall, when more than 0, makes a SUCCESS whose latency (as its
	// worker measured it) is more than SlowCall a slow call; exactly at
	// SlowCall is not slow. Slow calls are counted apart from failures and
	// trip by SlowCallThreshold (consecutive mode) or SlowCallRate (window
	// mode), under the same min_workers quorum. Default 0: off; at most 7
	// days. Slow-call counting writes on every slow success.
	SlowCall time.Duration
	// SlowCallThreshold is how many consecutive slow calls trip
	// (consecutive mode; needs SlowCall). Default 0: never.
	SlowCallThreshold int
	// SlowCallRate is the share of a window's calls that must be slow for
	// it to trip (window mode; needs SlowCall); exactly at the rate trips.
	// Default 0: never; else more than 0, at most 1.
	SlowCallRate float64
	// RecoveryCheck, when set, is a cheap request one daemon fleet-wide
	// sends every RecoveryCheckInterval while the circuit is open; a
	// success half-opens it at once. Nil (the default): no checks, the
	// cooldown alone decides when the next probe goes out.
	RecoveryCheck *RecoveryCheck
	// RecoveryCheckInterval is how often, fleet-wide, an open breaker's
	// recovery check runs (each daemon's timer adds up to 10% jitter,
	// never less). Default 30s (also what 0 means); from 100ms to 7 days.
	RecoveryCheckInterval time.Duration

	// Parent names the breaker's parent scope: a breaker in its own right
	// (its policy resolved by its own name), such as the vendor host
	// search-vendor for the tools web_search and news_search. While the
	// parent denies (open, forced open, paused, its probe in flight) this
	// breaker is denied with the parent's reason, and one call through a
	// child is the parent's probe. Optional; a printable breaker name. A
	// parent may not have a parent of its own (scopes are one level deep),
	// so it may not name the breaker itself either. See internal/scope.
	Parent string
	// CountTowardParent, with a parent, counts this breaker's own
	// outcomes toward the parent too (its failures run toward the
	// parent's trip under the parent's policy and quorum; its successes
	// end the parent's failure run). Default true: a parent that hears
	// nothing from its children only opens on direct calls or an
	// operator's word, which is rarely what naming it meant.
	CountTowardParent bool
	// Shadow, when true, runs the breaker in shadow mode: every decision
	// is computed and every transition recorded as an event marked shadow
	// ("would have opened"), but Allow always allows; records from calls
	// enforced mode would have denied count nothing. For tuning a policy
	// on real traffic before enforcing it. An operator's setting per
	// breaker (Force, breakerctl shadow) overrides it either way; a pin
	// wins over both. Default false.
	Shadow bool
	// CountUnrecognised, when true, counts OUTCOME_UNRECOGNISED (an error
	// no classifier recognises: ERROR_KIND_OTHER) as a failure. Default
	// false: such an error is as likely the tool's own bug as an outage
	// (docs/concepts.md, "Evidence and classification").
	CountUnrecognised bool
	// CostPerCall is what one call to the dependency costs, for the
	// estimate of spend avoided (calls not made times it). Nil (the
	// default): no estimate, calls are counted all the same.
	CostPerCall *Cost
}

// Cost is a price per call: an amount in a currency.
type Cost struct {
	// Amount is the price of one call; at least 0, finite.
	Amount float64
	// Currency names the amount's unit: 1 to 8 letters ("USD", "EUR",
	// "credits"), as the policy file writes it.
	Currency string
}

// String is the cost as the policy file's flow form writes it.
func (c Cost) String() string { return fmt.Sprintf("{amount: %g, currency: %s}", c.Amount, c.Currency) }

// Estimate is the spend that calls not made at cost c would have cost:
// an estimate (a refused call may have been retried later, or never made).
func (c Cost) Estimate(calls int64) float64 { return float64(calls) * c.Amount }

// Spend writes an estimated amount as breakerd shows it: "≈ 370.00 USD".
func Spend(amount float64, currency string) string {
	return fmt.Sprintf("≈ %.2f %s", amount, currency)
}

// The counting modes.
const (
	ModeConsecutive = "consecutive"
	ModeWindow      = "window"
)

// Bounds of a window.
const (
	MinWindow = 6 * time.Second
	MaxWindow = 24 * time.Hour
)

// Bounds on durations, so that no policy overflows a Redis TTL or makes a
// breaker unreachable for longer than an operator would believe.
const (
	MaxCooldown     = 7 * 24 * time.Hour
	MaxProbeTimeout = time.Hour
)

// Default returns the defaults described on each field of Policy.
func Default() Policy {
	return Policy{
		Threshold:      5,
		MinWorkers:     2,
		RateLimitTrips: 3,

		BareRateLimitWait: classify.DefaultBareWait,
		CooldownBase:      30 * time.Second,
		CooldownCap:       15 * time.Minute,
		Jitter:            0.2,
		ProbeTimeout:      30 * time.Second,
		PauseTTL:          time.Hour,
		Mode:              ModeConsecutive,
		Window:            time.Minute,
		FailureRate:       0.5,
		MinCalls:          10,

		RecoveryCheckInterval: DefaultRecoveryCheckInterval,
		CountTowardParent:     true,
	}
}

// Validate reports the first invalid field, naming it as the YAML file does.
func (p Policy) Validate() error {
	switch {
	case p.Threshold < 1:
		return fieldErr("threshold", "must be at least 1, got %d", p.Threshold)
	case p.MinWorkers < 1:
		return fieldErr("min_workers", "must be at least 1, got %d", p.MinWorkers)
	case p.RateLimitTrips < 1:
		return fieldErr("rate_limit_trips", "must be at least 1, got %d", p.RateLimitTrips)
	case p.BareRateLimitWait < 0 || p.BareRateLimitWait > MaxCooldown:
		return fieldErr("bare_rate_limit_wait", "must be between 0 (the default) and %s, got %s", MaxCooldown, p.BareRateLimitWait)
	case p.CooldownBase < time.Millisecond:
		return fieldErr("cooldown_base", "must be at least 1ms, got %s", p.CooldownBase)
	case p.CooldownCap < p.CooldownBase:
		return fieldErr("cooldown_cap", "must be at least cooldown_base (%s), got %s", p.CooldownBase, p.CooldownCap)
	case p.CooldownCap > MaxCooldown:
		return fieldErr("cooldown_cap", "must be at most %s, got %s", MaxCooldown, p.CooldownCap)
	case !(p.Jitter >= 0 && p.Jitter <= 1): // also rejects NaN
		return fieldErr("jitter", "must be between 0 and 1, got %g", p.Jitter)
	case p.ProbeTimeout < time.Millisecond:
		return fieldErr("probe_timeout", "must be at least 1ms, got %s", p.ProbeTimeout)
	case p.ProbeTimeout > MaxProbeTimeout:
		return fieldErr("probe_timeout", "must be at most %s, got %s", MaxProbeTimeout, p.ProbeTimeout)
	case p.PauseTTL < time.Minute || p.PauseTTL > MaxCooldown:
		return fieldErr("pause_ttl", "must be between 1m and %s, got %s", MaxCooldown, p.PauseTTL)
	case p.Mode != ModeConsecutive && p.Mode != ModeWindow:
		return fieldErr("mode", "must be consecutive or window, got %q", p.Mode)
	case p.Window < MinWindow || p.Window > MaxWindow:
		return fieldErr("window", "must be between %s and %s, got %s", MinWindow, MaxWindow, p.Window)
	case !(p.FailureRate > 0 && p.FailureRate <= 1):
		return fieldErr("failure_rate", "must be more than 0 and at most 1, got %g", p.FailureRate)
	case p.MinCalls < 2:
		return fieldErr("min_calls", "must be at least 2 (one failure out of one call never trips), got %d", p.MinCalls)
	}
	if err := p.validateSlow(); err != nil {
		return err
	}
	for i, a := range p.Alternatives {
		if a == "" {
			return fieldErr(fmt.Sprintf("alternatives[%d]", i), "must not be empty")
		}
	}
	if p.Parent != "" {
		var le *limits.FieldError
		if err := limits.Name("parent", p.Parent); errors.As(err, &le) {
			return fieldErr("parent", "%s", le.Problem)
		}
	}
	if err := p.validateCost(); err != nil {
		return err
	}
	return p.validateRecovery()
}

// validateCost checks cost_per_call: a finite amount of at least 0 in a
// currency of 1 to 8 letters.
func (p Policy) validateCost() error {
	c := p.CostPerCall
	if c == nil {
		return nil
	}
	if !(c.Amount >= 0 && c.Amount <= math.MaxFloat64) { // also rejects NaN and +Inf
		return fieldErr("cost_per_call.amount", "must be a finite number of at least 0, got %g", c.Amount)
	}
	ok := len(c.Currency) >= 1 && len(c.Currency) <= 8
	for _, r := range c.Currency {
		ok = ok && (r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z')
	}
	if !ok {
		return fieldErr("cost_per_call.currency", "must be 1 to 8 letters (USD, EUR, credits), got %q", c.Currency)
	}
	return nil
}

// validateSlow checks the slow-call fields: each trip field belongs to its
// mode and needs slow_call, and slow_call needs the trip field of the
// policy's mode (a limit that could never trip would count for nothing).
func (p Policy) validateSlow() error {
	switch {
	case p.SlowCall < 0 || p.SlowCall > MaxCooldown:
		return fieldErr("slow_call", "must be between 0 (off) and %s, got %s", MaxCooldown, p.SlowCall)
	case p.SlowCall > 0 && p.SlowCall%time.Millisecond != 0:
		return fieldErr("slow_call", "must be a whole number of milliseconds, got %s", p.SlowCall)
	case p.SlowCallThreshold < 0:
		return fieldErr("slow_call_threshold", "must be at least 1, got %d", p.SlowCallThreshold)
	case p.SlowCallThreshold > 0 && p.SlowCall == 0:
		return fieldErr("slow_call_threshold", "needs slow_call (the latency above which a success is slow)")
	case p.SlowCallThreshold > 0 && p.Mode == ModeWindow:
		return fieldErr("slow_call_threshold", "applies in consecutive mode only; window mode uses slow_call_rate")
	case p.SlowCallRate != 0 && !(p.SlowCallRate > 0 && p.SlowCallRate <= 1): // also rejects NaN
		return fieldErr("slow_call_rate", "must be more than 0 and at most 1, got %g", p.SlowCallRate)
	case p.SlowCallRate > 0 && p.SlowCall == 0:
		return fieldErr("slow_call_rate", "needs slow_call (the latency above which a success is slow)")
	case p.SlowCallRate > 0 && p.Mode != ModeWindow:
		return fieldErr("slow_call_rate", "applies in window mode only; consecutive mode uses slow_call_threshold")
	case p.SlowCall > 0 && p.Mode == ModeWindow && p.SlowCallRate == 0:
		return fieldErr("slow_call", "needs slow_call_rate in window mode (the share of slow calls that trips)")
	case p.SlowCall > 0 && p.Mode != ModeWindow && p.SlowCallThreshold == 0:
		return fieldErr("slow_call", "needs slow_call_threshold in consecutive mode (the consecutive slow calls that trip)")
	}
	return nil
}

// BareWait is BareRateLimitWait, or its default when zero.
func (p Policy) BareWait() time.Duration {
	if p.BareRateLimitWait == 0 {
		return classify.DefaultBareWait
	}
	return p.BareRateLimitWait
}

// Retention is how long a breaker's stored verdict outlives its last
// write (and its last due time: next probe, lease, pin or pause end): the
// cooldown cap plus the probe timeout, so that an expired key can never
// read as a healthy closed breaker while an open is still due.
func (p Policy) Retention() time.Duration {
	return p.CooldownCap + p.ProbeTimeout
}

// FieldError names the configuration field that is invalid.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// prefixField returns err with its field name prefixed, for nested YAML.
func prefixField(prefix string, err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		return &FieldError{Field: prefix + "." + fe.Field, Msg: fe.Msg}
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// Fields returns the policy as the policy file spells it: one "key: value"
// line per field, in the file's order, durations in Go's syntax ("30s"),
// alternatives as a YAML flow list. breakerd --check-config prints it.
func (p Policy) Fields() []string {
	alts := "[]"
	if len(p.Alternatives) > 0 {
		alts = "[" + strings.Join(p.Alternatives, ", ") + "]"
	}
	// Only the counting fields of the policy's mode: the others do nothing.
	counting := []string{
		fmt.Sprintf("mode: %s", p.Mode),
		fmt.Sprintf("threshold: %d", p.Threshold),
		fmt.Sprintf("rate_limit_trips: %d", p.RateLimitTrips),
	}
	if p.Mode == ModeWindow {
		counting = []string{
			fmt.Sprintf("mode: %s", p.Mode),
			fmt.Sprintf("window: %s", p.Window),
			fmt.Sprintf("failure_rate: %g", p.FailureRate),
			fmt.Sprintf("min_calls: %d", p.MinCalls),
		}
	}
	if p.SlowCall > 0 {
		counting = append(counting, fmt.Sprintf("slow_call: %s", p.SlowCall))
		if p.Mode == ModeWindow {
			counting = append(counting, fmt.Sprintf("slow_call_rate: %g", p.SlowCallRate))
		} else {
			counting = append(counting, fmt.Sprintf("slow_call_threshold: %d", p.SlowCallThreshold))
		}
	}
	out := append(counting,
		fmt.Sprintf("min_workers: %d", p.MinWorkers),
		fmt.Sprintf("bare_rate_limit_wait: %s", p.BareWait()),
		fmt.Sprintf("cooldown_base: %s", p.CooldownBase),
		fmt.Sprintf("cooldown_cap: %s", p.CooldownCap),
		fmt.Sprintf("jitter: %g", p.Jitter),
		fmt.Sprintf("probe_timeout: %s", p.ProbeTimeout),
		fmt.Sprintf("pause_ttl: %s", p.PauseTTL),
		fmt.Sprintf("alternatives: %s", alts),
		fmt.Sprintf("shadow: %t", p.Shadow),
		fmt.Sprintf("count_unrecognised: %t", p.CountUnrecognised),
	)
	if p.Parent != "" {
		out = append(out, fmt.Sprintf("parent: %s", p.Parent), fmt.Sprintf("count_toward_parent: %t", p.CountTowardParent))
	}
	if p.CostPerCall != nil {
		out = append(out, "cost_per_call: "+p.CostPerCall.String())
	}
	if p.RecoveryCheck != nil {
		// A comment: the check is shown without credentials, so it is
		// not meant to be pasted back.
		out = append(out, fmt.Sprintf("# recovery check: %s every %s (timeout %s)",
			p.RecoveryCheck.Describe(), p.CheckInterval(), p.RecoveryCheck.Timeout))
	}
	return out
}
