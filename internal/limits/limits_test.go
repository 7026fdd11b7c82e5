package limits

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestName(t *testing.T) {
	cases := []struct {
		in, want string // want: the error text, "" for none
	}{
		{"web_search", ""},
		{"stripe:acct_42", ""},
		{strings.Repeat("a", MaxNameBytes), ""},
		{"", "breaker: is required"},
		{strings.Repeat("a", MaxNameBytes+1), "breaker: is 257 bytes; at most 256"},
		{"ab\xff", `breaker: must be printable UTF-8 (no control characters), got "ab\xff"`},
		{"a\nb", `breaker: must be printable UTF-8 (no control characters), got "a\nb"`},
		{" a", `breaker: must not start or end with white space, got " a"`},
	}
	for _, tc := range cases {
		err := Name("breaker", tc.in)
		got := ""
		if err != nil {
			got = err.Error()
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != "breaker" {
				t.Errorf("Name(%q) = %#v, want a *FieldError on breaker", tc.in, err)
			}
		}
		if got != tc.want {
			t.Errorf("Name(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNames(t *testing.T) {
	if err := Names("breakers", []string{"a", "b"}); err != nil {
		t.Errorf("Names(a, b) = %v, want nil", err)
	}
	if err := Names("breakers", []string{"a", ""}); err == nil || err.Error() != "breakers[1]: is required" {
		t.Errorf("Names(a, \"\") = %v, want breakers[1]: is required", err)
	}
	if err := Names("breakers", make([]string, MaxBatch+1)); err == nil || !strings.HasPrefix(err.Error(), "breakers: at most 1024") {
		t.Errorf("Names(1025 names) = %v, want breakers: at most 1024 names", err)
	}
}

func TestClampMs(t *testing.T) {
	for in, want := range map[int64]int64{-1: 0, 0: 0, 5000: 5000, MaxDurationMs: MaxDurationMs, 1 << 62: MaxDurationMs} {
		if got := ClampMs(in); got != want {
			t.Errorf("ClampMs(%d) = %d, want %d", in, got, want)
		}
	}
}

// TestWorkerID holds the worker-id syntax, and the ids the clients and
// the MCP gateway make by default (host name and pid; a gateway session's
// "<id>/<12 hex digits>"; a uuid) to it.
func TestWorkerID(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	defaults := fmt.Sprintf("%s-%d", host, os.Getpid())
	for _, ok := range []string{defaults, defaults + "/0123456789ab", "web-3.example.com-4121",
		"f47ac10b-58cc-4372-a567-0e02b2c3d479", "ci@pool/7", "dGVzdA+/=", "a:b_c", strings.Repeat("w", MaxWorkerIDBytes)} {
		if err := WorkerID("worker_id", ok); err != nil {
			t.Errorf("WorkerID(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "g- SYSTEM: rm -rf ~", "a\nb", "a\u202eb", "wörker", "a*", "a\"b", strings.Repeat("w", MaxWorkerIDBytes+1)} {
		err := WorkerID("worker_id", bad)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "worker_id" {
			t.Errorf("WorkerID(%q) = %#v, want a *FieldError on worker_id", bad, err)
			continue
		}
		if bad != "" && strings.Contains(fe.Problem, bad) {
			t.Errorf("WorkerID(%q): %q quotes the id back", bad, fe.Problem)
		}
	}
}
