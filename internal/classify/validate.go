package classify

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/breakerd/breakerd/internal/limits"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Bounds on a CallEvidence (its proto comment states them).
const (
	// MaxHeaders bounds the headers one evidence carries.
	MaxHeaders = 32
	// MaxHeaderNameBytes bounds a header's name.
	MaxHeaderNameBytes = 64
	// MaxHeaderValueBytes bounds a header's value.
	MaxHeaderValueBytes = 256
	// MaxBodyCodeBytes bounds body_error_code.
	MaxBodyCodeBytes = 64
)

// Validate checks ev against the bounds, naming the field under field
// ("evidence.headers"): a *limits.FieldError, or nil. A nil ev is valid.
// It never echoes an oversized value.
func Validate(field string, ev *pb.CallEvidence) error {
	if ev == nil {
		return nil
	}
	bad := func(f, format string, args ...any) error {
		return &limits.FieldError{Field: field + "." + f, Problem: fmt.Sprintf(format, args...)}
	}
	if c := ev.GetHttpStatus(); c != 0 && (c < 100 || c > 599) {
		return bad("http_status", "must be 0 (no HTTP response) or 100 to 599, got %d", c)
	}
	if err := validHeaders(field+".headers", ev.GetHeaders()); err != nil {
		return err
	}
	if d := ev.GetDate(); d != "" {
		if _, err := http.ParseTime(d); err != nil || len(d) > MaxHeaderValueBytes {
			return bad("date", "must be an HTTP-date (\"Sun, 25 Oct 2026 09:33:20 GMT\") or empty")
		}
	}
	if c := ev.GetBodyErrorCode(); len(c) > MaxBodyCodeBytes || !limits.Printable(c) {
		return bad("body_error_code", "must be printable and at most %d bytes, got %d bytes", MaxBodyCodeBytes, len(c))
	}
	if ev.GrpcStatus != nil && (ev.GetGrpcStatus() < 0 || ev.GetGrpcStatus() > int32(MaxGRPCStatus)) {
		return bad("grpc_status", "must be a gRPC status code, 0 to %d, got %d", MaxGRPCStatus, ev.GetGrpcStatus())
	}
	if ev.GrpcRetryDelayMs != nil && ev.GetGrpcRetryDelayMs() < 0 {
		return bad("grpc_retry_delay_ms", "must not be negative, got %d", ev.GetGrpcRetryDelayMs())
	}
	if _, ok := pb.ErrorKind_name[int32(ev.GetErrorKind())]; !ok {
		return bad("error_kind", "must be one of the defined error kinds, got %d", ev.GetErrorKind())
	}
	return nil
}

// validHeaders checks the count first, then every name, then every value,
// so that a flood is refused before it is read through.
func validHeaders(field string, h map[string]string) error {
	bad := func(f, format string, args ...any) error {
		return &limits.FieldError{Field: f, Problem: fmt.Sprintf(format, args...)}
	}
	if len(h) > MaxHeaders {
		return bad(field, "at most %d headers, got %d", MaxHeaders, len(h))
	}
	for name := range h {
		if len(name) == 0 || len(name) > MaxHeaderNameBytes {
			return bad(field, "a header name is %d bytes; names are 1 to %d bytes", len(name), MaxHeaderNameBytes)
		}
		if !token(name) {
			return bad(field, "header name %q must be lower-case token characters (a-z 0-9 !#$%%&'*+-.^_`|~)", name)
		}
	}
	for name, v := range h {
		if len(v) > MaxHeaderValueBytes {
			return bad(field+"["+strconv.Quote(name)+"]", "is %d bytes; at most %d", len(v), MaxHeaderValueBytes)
		}
		if !limits.Printable(v) {
			return bad(field+"["+strconv.Quote(name)+"]", "must be printable UTF-8 (no control characters)")
		}
	}
	return nil
}

// token: RFC 9110's token characters, lower-case letters only.
func token(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
