// Package limits holds the bounds breakerd puts on request fields and the
// checks that apply them. The daemon (internal/server) and the Go client
// (pkg/client) share it, so the client refuses exactly what the daemon
// would, naming the same field, without a round trip. It imports only the
// standard library.
package limits

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameBytes bounds breaker names, worker ids and operator names.
const MaxNameBytes = 256

// MaxBatch bounds the names of one BatchGet or Watch.
const MaxBatch = 1024

// MaxDurationMs bounds every *_ms duration a request carries (7 days, in
// milliseconds), so none overflows a time.Duration or pins a breaker for
// years.
const MaxDurationMs = 7 * 24 * 3600 * 1000

// FieldError is a request field that breaks a limit. Its text names the
// field first ("breaker: is required").
type FieldError struct {
	// Field is the request field ("breaker", "worker_id", "breakers[3]").
	Field string
	// Problem says what is wrong with it, in plain words.
	Problem string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Name checks a breaker name, worker id or operator: non-empty, at most
// MaxNameBytes, printable UTF-8 (no control characters), no leading or
// trailing white space. The error is a *FieldError naming field.
func Name(field, v string) error {
	switch {
	case v == "":
		return invalid(field, "is required")
	case len(v) > MaxNameBytes:
		return invalid(field, "is %d bytes; at most %d", len(v), MaxNameBytes)
	case !Printable(v):
		return invalid(field, "must be printable UTF-8 (no control characters), got %q", v)
	case strings.TrimSpace(v) != v:
		return invalid(field, "must not start or end with white space, got %q", v)
	}
	return nil
}

// Names checks a list of breaker names: at most MaxBatch, each as Name,
// the error naming the element ("breakers[3]").
func Names(field string, names []string) error {
	if len(names) > MaxBatch {
		return invalid(field, "at most %d names, got %d", MaxBatch, len(names))
	}
	for i, n := range names {
		if err := Name(fmt.Sprintf("%s[%d]", field, i), n); err != nil {
			return err
		}
	}
	return nil
}

// Printable reports whether v is valid UTF-8 made only of printable runes.
func Printable(v string) bool {
	if !utf8.ValidString(v) {
		return false
	}
	for _, r := range v {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// OneLine returns v made fit for a one-line reason: invalid UTF-8 replaced
// by "?", every non-printable rune (newlines, tabs, control characters)
// by a space, cut to at most n bytes on a rune boundary.
func OneLine(v string, n int) string {
	v = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, strings.ToValidUTF8(v, "?"))
	for len(v) > n {
		_, size := utf8.DecodeLastRuneInString(v)
		v = v[:len(v)-size]
	}
	return v
}

// ClampMs returns ms within [0, MaxDurationMs].
func ClampMs(ms int64) int64 { return min(max(ms, 0), MaxDurationMs) }
