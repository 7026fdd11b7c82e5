// Package probe owns the half-open rules: the growing, capped cooldown
// between probes and its jitter (Schedule), and the fenced probe lease
// (one holder fleet-wide, lapsing after the probe timeout; MaxLapses).
//
// What lives where: the lease's fields (token, end, holder, the run of
// lapses) are stored in breaker.State, because the state hash holds them
// and every transition clears them, and the policy's schedule arrives in
// breaker.Params (CooldownBase, CooldownCap, Jitter). This package owns
// their rules and imports neither internal/breaker nor the stubs, so the
// machine composes it without a cycle. The scripts' copies are
// open_period and the lease checks in internal/store/scripts/lib.lua.
//
// All times are integer milliseconds, as the scripts compute them, so the
// Go state machine (internal/breaker) and the Lua
// (internal/store/scripts) agree to the millisecond.
package probe

import (
	"crypto/rand"
	"encoding/hex"
	"math"
)

// Cooldown returns the open period, ms, after level failed probes (0 for
// the trip itself): base doubled level times, capped at cap. For 30s and
// 15m: 30s, 1m, 2m, 4m, 8m, 15m, 15m, ... base must be positive and
// cap >= base.
func Cooldown(base, cap, level int64) int64 {
	cd := base
	for i := int64(0); i < level && cd < cap; i++ {
		cd *= 2
	}
	return min(cd, cap)
}

// Schedule is a policy's cooldown schedule as one call receives it: the
// base and the cap, ms, and the jitter already drawn (the policy's jitter
// fraction times one uniform draw in [0, 1)).
type Schedule struct {
	Base, Cap int64
	Jitter    float64
}

// OpenPeriod is the open period, ms, a transition into open starts after
// level failed probes (0 for the trip itself): the schedule's step
// (Cooldown) or the Retry-After of the outcome that opened it, whichever
// is longer, jittered (Jitter). A suspect's denial and a refused prober's
// wait are OpenPeriod(0, 0).
func (s Schedule) OpenPeriod(level, retryAfter int64) int64 {
	return Jitter(max(Cooldown(s.Base, s.Cap, level), retryAfter), s.Jitter)
}

// BackoffKept is how many of its last open periods a breaker that a probe
// closed keeps its backoff level for (docs/concepts.md, "Cooldown"): a
// trip before then opens one level up (twice the cooldown) and is a
// flapping vendor's; a breaker closed that long without a trip starts
// again at the base cooldown. One good probe is no proof of health.
const BackoffKept = 2

// KeptUntil is until when, ms, a breaker that a probe closed at now keeps
// its backoff level: BackoffKept times the open period cd it closed from.
func KeptUntil(now, cd int64) int64 { return now + BackoffKept*cd }

// TripLevel is the level a trip at now opens at, for a breaker that
// kept level until keptUntil (0: none kept): one above it while kept, and
// kept reports that (the vendor is flapping); 0 otherwise.
func TripLevel(level, keptUntil, now int64) (next int64, kept bool) {
	if now < keptUntil {
		return level + 1, true
	}
	return 0, false
}

// MaxLapses is how many probe leases in a row one worker may let lapse
// unsettled before it is reported (probe_abandoned) and refused probes for
// one base cooldown.
const MaxLapses = 3

// Jitter returns d, ms, lengthened by floor(d*j), where j is the policy's
// jitter fraction times a uniform draw in [0, 1), made once per call by the
// daemon. Lengthening only keeps the promise that a cooldown is at least
// its nominal length; spreading keeps breakers opened in the same second
// from probing in the same second. The scripts compute the same
// expression in IEEE doubles.
func Jitter(d int64, j float64) int64 {
	return d + int64(math.Floor(float64(d)*j))
}

// LeaseLive reports whether a lease token with the given expiry (ms) is
// held at now: a lease lapses at exactly its expiry.
func LeaseLive(token string, until, now int64) bool {
	return token != "" && until > now
}

// Holds reports whether a ticket's lease token and generation are the
// live probe's: only the holder's outcome decides a probe.
func Holds(ticketToken string, ticketGen int64, lease string, gen int64) bool {
	return ticketToken != "" && ticketToken == lease && ticketGen == gen
}

// NewToken returns a random 128-bit lease token, hex-encoded.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error (Go 1.24+)
	var h [32]byte         // encoded here, so the string is the one allocation
	hex.Encode(h[:], b[:])
	return string(h[:])
}
