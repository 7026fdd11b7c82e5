// Package probe owns the half-open rules: the growing, capped cooldown
// between probes and its jitter, and the fenced probe lease (one holder
// fleet-wide, lapsing after the probe timeout).
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
	return hex.EncodeToString(b[:])
}
