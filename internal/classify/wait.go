package classify

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxWait is the largest wait a header can say: what a time.Duration
// holds in whole seconds (about 292 years). A longer value, even one
// beyond int64, reads as MaxWait, so the call still counts as a wait no
// deadline covers.
const MaxWait = time.Duration(math.MaxInt64/int64(time.Second)) * time.Second

// WaitHeaders returns the response headers Wait reads, lower-cased (a
// function, not a package variable nobody may change).
func WaitHeaders() []string {
	return []string{
		"retry-after",
		"retry-after-ms",
		"x-ratelimit-reset-requests",
		"x-ratelimit-reset-tokens",
		"anthropic-ratelimit-requests-reset",
		"anthropic-ratelimit-tokens-reset",
		"anthropic-ratelimit-input-tokens-reset",
		"anthropic-ratelimit-output-tokens-reset",
		"ratelimit-reset",
	}
}

// RetryAfter reads a Retry-After value in either form RFC 9110 (section
// 10.2.3) allows: delta-seconds ("120") or an HTTP-date, which is taken
// relative to now (a date in the past is 0). Delta-seconds too large for
// a time.Duration read as MaxWait. ok is false for an empty or
// unparsable value.
func RetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if digits(v) {
		return seconds(v)
	}
	t, err := http.ParseTime(v) // IMF-fixdate, and the obsolete RFC 850 and asctime forms
	if err != nil {
		return 0, false
	}
	return max(0, t.Sub(now)), true
}

// Wait reads how long a response says to wait before calling again, from
// every header in h (lower-cased names) that says it; the longest wait
// present wins. It reads:
//
//	retry-after                              delta-seconds or HTTP-date (RFC 9110 section 10.2.3)
//	retry-after-ms                           milliseconds, may be fractional (OpenAI, Azure OpenAI)
//	x-ratelimit-reset-requests, -tokens      a Go-style duration ("6m0s", "20ms") or seconds (OpenAI)
//	anthropic-ratelimit-requests-reset,
//	  -tokens-reset, -input-tokens-reset,
//	  -output-tokens-reset                   an RFC 3339 time, relative to now (Anthropic)
//	ratelimit-reset                          delta-seconds (IETF draft-ietf-httpapi-ratelimit-headers)
//
// A time in the past is a wait of 0; a value too large for a
// time.Duration is MaxWait. Unparsable and negative values are skipped.
// ok is false when no header gave a wait.
func Wait(h map[string]string, now time.Time) (d time.Duration, ok bool) {
	add := func(w time.Duration, good bool) {
		if good {
			d, ok = max(d, w), true
		}
	}
	for _, name := range WaitHeaders() {
		v := strings.TrimSpace(h[name])
		if v == "" {
			continue
		}
		switch name {
		case "retry-after":
			add(RetryAfter(v, now))
		case "retry-after-ms":
			add(decimal(v, time.Millisecond))
		case "x-ratelimit-reset-requests", "x-ratelimit-reset-tokens":
			if w, err := time.ParseDuration(v); err == nil && w >= 0 {
				add(w, true)
			} else {
				add(decimal(v, time.Second))
			}
		case "ratelimit-reset":
			if digits(v) {
				add(seconds(v))
			}
		default: // anthropic-ratelimit-*-reset
			if t, err := time.Parse(time.RFC3339, v); err == nil {
				add(max(0, t.Sub(now)), true)
			}
		}
	}
	return d, ok
}

func digits(v string) bool {
	if v == "" {
		return false
	}
	for _, r := range v {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// seconds reads delta-seconds (digits only), saturating at MaxWait.
func seconds(v string) (time.Duration, bool) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n > int64(MaxWait/time.Second) { // ErrRange: beyond int64
		return MaxWait, true
	}
	return time.Duration(n) * time.Second, true
}

// decimal reads a non-negative decimal number ("1500", "0.5") of unit,
// saturating at MaxWait.
func decimal(v string, unit time.Duration) (time.Duration, bool) {
	whole, frac, _ := strings.Cut(v, ".")
	if !digits(whole) || (frac != "" && !digits(frac)) {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	if f*float64(unit) >= float64(MaxWait) {
		return MaxWait, true
	}
	return time.Duration(f * float64(unit)), true
}
