// Package limits is the one home of breakerd's bounds: on request fields
// (names, batches, durations), shared by the daemon and the Go client so
// that the client refuses exactly what the daemon would, naming the same
// field; and on listeners, every limit a caller meets before and as it
// authenticates, each with its default and why (Listener).
//
// Every listener the daemon serves passes through the listener limits:
//
//   - Conns (NewConns, then Conns.Listen on each net.Listener) caps the
//     connections open over all listeners, below the file limit less a
//     reserve; a connection that has made no authenticated call gives
//     way to a new one at the cap and at its source's share, and is
//     closed when idle (Conns.Run). The servers report calls through
//     Conns.Calls (gRPC) and Conns.ConnContext with Track (HTTP).
//   - gRPC: Listener.GRPCOptions (header list, message size, streams per
//     connection, handshake and idle timeouts, keepalive),
//     Listener.OpenStreamCap (streams of the services that need no
//     token, shared per source and ended when idle) and WrapService with a Gate per method class (per-token
//     calls in flight, taken before the request is decoded).
//   - HTTP: Listener.HTTPServer (header bytes, header read timeout, idle
//     timeout) and Listener.HTTPHandler, which refuses a request on its
//     header size, declared body size, credentials (HTTPOptions.
//     Authenticate) and its caller's Gate before the body is read, then
//     cuts the body at MaxRecvBytes.
//
// A Gate's PerKey is shared by every listener, so a token's calls count
// once whichever way they arrive. docs/security.md lists each limit with
// its flag.
package limits

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameBytes bounds breaker names and operator names.
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

// Name checks a breaker name or operator: non-empty, at most
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

// MaxWorkerIDBytes bounds a worker id (WorkerID).
const MaxWorkerIDBytes = 128

// workerIDBytes are the bytes a worker id may hold besides letters and
// digits: enough for a host name and pid ("web-3.example-4121"), a uuid,
// an email-like or path-like id ("ci@pool/7") and base64.
const workerIDBytes = "._:@/+=-"

// WorkerID checks a worker id: 1 to MaxWorkerIDBytes of A-Z a-z 0-9 and
// workerIDBytes. A worker id reaches what a model reads (a suspect
// worker's denial, an abandoned probe's reason), so it is an identifier,
// never text: an id outside the syntax is refused, never quoted back.
// The error is a *FieldError naming field.
func WorkerID(field, v string) error {
	if v == "" || len(v) > MaxWorkerIDBytes {
		return invalid(field, "must be 1 to %d characters of A-Z a-z 0-9 %s, got %d bytes", MaxWorkerIDBytes, workerIDBytes, len(v))
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(workerIDBytes, c) >= 0) {
			return invalid(field, "must keep to A-Z a-z 0-9 %s; byte %d is not in it", workerIDBytes, i)
		}
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

// MaxToolNameBytes bounds a tool's name (MCP's tool-name syntax).
const MaxToolNameBytes = 128

// ToolName checks a tool's name as a model knows it against MCP's
// tool-name syntax: 1 to MaxToolNameBytes of A-Z a-z 0-9 _ - . A name
// outside it may carry words for the model (newlines, bidirectional
// controls, "SYSTEM: ..."), so it is refused, never quoted back. The
// error is a *FieldError naming field.
func ToolName(field, v string) error {
	if v == "" || len(v) > MaxToolNameBytes {
		return invalid(field, "must be 1 to %d characters of MCP's tool-name syntax (A-Z a-z 0-9 _ - .), got %d bytes", MaxToolNameBytes, len(v))
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return invalid(field, "must keep to MCP's tool-name syntax (A-Z a-z 0-9 _ - .); byte %d is not in it", i)
		}
	}
	return nil
}
