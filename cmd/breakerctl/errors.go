package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/protocol"
)

// Exit codes; the package doc lists them.
const (
	exitFailure     = 1
	exitUsage       = 2
	exitUnknown     = 3
	exitDenied      = 4
	exitUnreachable = 5
)

// exitError is a failure with its exit code and one-line message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

// rpcErr turns a failed call to breakerd at addr into an exitError.
func rpcErr(addr string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return &exitError{code: exitFailure, msg: "interrupted"}
	}
	st, ok := status.FromError(err)
	if !ok {
		return &exitError{code: exitFailure, msg: err.Error()}
	}
	msg := st.Message()
	switch st.Code() {
	case codes.Unavailable:
		if hasReason(st, protocol.ReasonRedisUnavailable) {
			return &exitError{code: exitUnreachable, msg: fmt.Sprintf("breakerd at %s cannot reach Redis: %s", addr, msg)}
		}
		// The daemon answered but refused our client certificate.
		if strings.Contains(msg, "certificate required") || strings.Contains(msg, "bad certificate") || strings.Contains(msg, "unknown certificate authority") {
			return &exitError{code: exitDenied, msg: fmt.Sprintf("breakerd at %s refused the client certificate (--tls-cert, --tls-key): %s", addr, msg)}
		}
		return &exitError{code: exitUnreachable, msg: fmt.Sprintf("cannot reach breakerd at %s: %s", addr, msg)}
	case codes.DeadlineExceeded:
		return &exitError{code: exitUnreachable, msg: fmt.Sprintf("breakerd at %s did not answer in time (--timeout): %s", addr, msg)}
	case codes.Unauthenticated:
		return &exitError{code: exitDenied, msg: fmt.Sprintf("not authenticated by breakerd at %s (set --token or BREAKERCTL_TOKEN): %s", addr, msg)}
	case codes.PermissionDenied:
		return &exitError{code: exitDenied, msg: fmt.Sprintf("permission denied by breakerd at %s: %s", addr, msg)}
	case codes.InvalidArgument:
		return &exitError{code: exitUsage, msg: "invalid argument: " + msg}
	case codes.NotFound:
		return &exitError{code: exitUnknown, msg: msg}
	case codes.Canceled:
		return &exitError{code: exitFailure, msg: "interrupted"}
	}
	return &exitError{code: exitFailure, msg: fmt.Sprintf("breakerd at %s: %s: %s", addr, st.Code(), msg)}
}

// hasReason reports whether st carries breakerd's ErrorInfo with reason.
func hasReason(st *status.Status, reason string) bool {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == protocol.ErrorDomain && info.GetReason() == reason {
			return true
		}
	}
	return false
}

// report writes err as one line to w and returns the exit code: 0 for
// nil, the exitError's code, or exitUsage for cobra's own flag and
// argument errors.
func report(err error, w io.Writer) int {
	if err == nil {
		return 0
	}
	code := exitUsage // cobra's errors (unknown command or flag) are usage errors
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	line := strings.Join(strings.Fields(err.Error()), " ")
	fmt.Fprintln(w, "breakerctl: "+line)
	return code
}
