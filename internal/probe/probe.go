// Package probe computes what the half-open state hands out: the growing,
// capped cooldown between probes, its jitter, and probe lease tokens.
// The lease itself is taken and checked atomically in Redis
// (internal/store/scripts/allow.lua and record.lua).
package probe

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// maxLevels bounds a schedule's length; a cooldown doubled 40 times from
// 1ms already exceeds any sane cap.
const maxLevels = 40

// Schedule returns the cooldown after a trip and after each failed probe:
// base, 2*base, 4*base, ..., ending with cap once doubling reaches it (for
// 30s and 15m: 30s, 1m, 2m, 4m, 8m, 15m). The last entry repeats for every
// later failed probe. base must be positive and cap >= base.
func Schedule(base, cap time.Duration) []time.Duration {
	s := []time.Duration{min(base, cap)}
	for d := base; d < cap && len(s) < maxLevels; {
		d = min(d*2, cap)
		s = append(s, d)
	}
	return s
}

// Jittered returns d lengthened by up to jitter*d: d * (1 + jitter*u), with
// u drawn uniformly from [0, 1) by the caller. Lengthening only (never
// shortening) keeps the promise that a cooldown is at least its nominal
// length; spreading by u keeps breakers opened in the same second from
// probing in the same second.
func Jittered(d time.Duration, jitter, u float64) time.Duration {
	return d + time.Duration(float64(d)*jitter*u)
}

// NewToken returns a random 128-bit lease token, hex-encoded.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error (Go 1.24+)
	return hex.EncodeToString(b[:])
}
