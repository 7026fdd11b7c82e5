package mcpgw

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig([]byte(`
worker_id: session
upstreams:
  - name: search
    command: ["search-mcp", "--stdio"]
    env: {REGION: eu}
    timeout: 20s
    connect_timeout: 5s
    breakers: {web_search: vendor-x}
  - name: tickets
    url: http://127.0.0.1:9000/mcp
    is_error: invalid_argument
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.breakerFor(c.Upstreams[0], "web_search"); got != "vendor-x" {
		t.Errorf("override breaker = %q, want vendor-x", got)
	}
	if got := c.breakerFor(c.Upstreams[1], "open_ticket"); got != "mcp:tickets:open_ticket" {
		t.Errorf("default breaker = %q, want mcp:tickets:open_ticket", got)
	}
	if got := c.Upstreams[0].timeout(); got != 20*time.Second {
		t.Errorf("timeout = %v, want 20s", got)
	}
	if got := c.Upstreams[0].connectTimeout(); got != 5*time.Second {
		t.Errorf("connect timeout = %v, want 5s", got)
	}
	if got := c.Upstreams[1].timeout(); got != DefaultTimeout {
		t.Errorf("default timeout = %v, want %v", got, DefaultTimeout)
	}
	if o, _ := c.Upstreams[1].isErrorOutcome(); o != pb.Outcome_OUTCOME_INVALID_ARGUMENT {
		t.Errorf("is_error outcome = %v, want INVALID_ARGUMENT", o)
	}
}

func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{``, "upstreams: at least one is required"},
		{`upstreams: [{name: a}]`, "upstreams[0]: set exactly one of command or url"},
		{`upstreams: [{name: a, command: [x], url: "http://h/mcp"}]`, "upstreams[0]: set exactly one of command or url"},
		{`upstreams: [{name: "a:b", command: [x]}]`, "upstreams[0].name: must be printable with no colon"},
		{`upstreams: [{name: a, command: [x]}, {name: a, command: [y]}]`, `upstreams[1].name: "a" is used twice`},
		{`upstreams: [{name: a, url: "ftp://h"}]`, "upstreams[0].url: must be an http or https URL"},
		{`upstreams: [{name: a, command: [x], timeout: soon}]`, `"soon" is not a duration`},
		{`upstreams: [{name: a, command: [x], connect_timeout: -1s}]`, "upstreams[0].connect_timeout: must not be negative"},
		{`upstreams: [{name: a, command: [x], is_error: oops}]`, `upstreams[0].is_error: "oops" is not an outcome`},
		{`upstreams: [{name: a, command: [x], breakers: {t: " x"}}]`, "upstreams[0].breakers.t: breaker: must not start or end with white space"},
		{`upstreams: [{name: a, url: "http://h/mcp", env: {A: b}}]`, "upstreams[0].env: only for a command upstream"},
		{`worker_id: me
upstreams: [{name: a, command: [x]}]`, `worker_id: must be empty or "session"`},
		{`upstreams: [{name: a, command: [x], tiemout: 3s}]`, "unknown field tiemout"},
	} {
		_, err := ParseConfig([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%q) = %v, want an error with %q", tc.yaml, err, tc.want)
		}
	}
}

// TestClassify is docs/mcp.md's table of outcomes, row by row.
func TestClassify(t *testing.T) {
	t.Parallel()
	deadline, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name  string
		err   error
		want  pb.Outcome
		retry time.Duration
	}{
		{"result", nil, pb.Outcome_OUTCOME_SUCCESS, 0},
		{"isError result", &client.OutcomeError{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR}, pb.Outcome_OUTCOME_SERVER_ERROR, 0},
		{"JSON-RPC invalid params", fmt.Errorf("calling: %w", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams}), pb.Outcome_OUTCOME_INVALID_ARGUMENT, 0},
		{"JSON-RPC method not found", &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound}, pb.Outcome_OUTCOME_INVALID_ARGUMENT, 0},
		{"JSON-RPC internal error", &jsonrpc.Error{Code: jsonrpc.CodeInternalError}, pb.Outcome_OUTCOME_SERVER_ERROR, 0},
		{"JSON-RPC server-defined code", &jsonrpc.Error{Code: -32001}, pb.Outcome_OUTCOME_SERVER_ERROR, 0},
		{"HTTP 429 with Retry-After", errors.Join(&jsonrpc.Error{Code: codeRejected}, &client.HTTPError{StatusCode: 429, Status: "429 Too Many Requests", RetryAfter: "120"}), pb.Outcome_OUTCOME_RATE_LIMITED, 120 * time.Second},
		{"HTTP 503", errors.Join(&jsonrpc.Error{Code: codeRejected}, &client.HTTPError{StatusCode: 503, Status: "503 Service Unavailable"}), pb.Outcome_OUTCOME_SERVER_ERROR, 0},
		{"rejected by transport", &jsonrpc.Error{Code: codeRejected}, pb.Outcome_OUTCOME_TRANSPORT, 0},
		{"connection closed", fmt.Errorf("calling: %w", mcp.ErrConnectionClosed), pb.Outcome_OUTCOME_TRANSPORT, 0},
		{"timeout", context.DeadlineExceeded, pb.Outcome_OUTCOME_TIMEOUT, 0},
		{"other", errors.New("EOF on stdout"), pb.Outcome_OUTCOME_TRANSPORT, 0},
	} {
		r, ok := classify(deadline, tc.err)
		if !ok || r.Outcome != tc.want || r.RetryAfter != tc.retry {
			t.Errorf("classify(%s) = %v %v retry %v, want %v retry %v", tc.name, r.Outcome, ok, r.RetryAfter, tc.want, tc.retry)
		}
	}
	// A 429 is judged against the call's own deadline, not the budget
	// that also covers connecting.
	box := &deadlineBox{}
	box.set(time.Now().Add(10 * time.Second))
	boxed, cancel3 := context.WithTimeout(context.WithValue(context.Background(), deadlineKey{}, box), time.Minute)
	defer cancel3()
	r, _ := classify(boxed, &client.HTTPError{StatusCode: 429, Status: "429 Too Many Requests", RetryAfter: "20"})
	if r.Outcome != pb.Outcome_OUTCOME_RATE_LIMITED || r.Deadline > 10*time.Second || r.RetryAfter != 20*time.Second {
		t.Errorf("classify(429, Retry-After 20s, call deadline in 10s) = %v deadline %v retry %v; want RATE_LIMITED, at most 10s, 20s", r.Outcome, r.Deadline, r.RetryAfter)
	}
	canceled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, ok := classify(canceled, context.Canceled); ok {
		t.Error("classify(the agent's own cancellation) recorded; want not recorded")
	}
}

// TestSandboxConfig: sandbox and run_as are a command's, and run_as
// needs both ids, each a valid one; errors name the field.
func TestSandboxConfig(t *testing.T) {
	t.Parallel()
	for yaml, want := range map[string]string{
		"upstreams: [{name: a, url: 'http://x/mcp', sandbox: false}]":                 "upstreams[0]: sandbox and run_as are only for a command upstream",
		"upstreams: [{name: a, command: [x], run_as: {uid: 1001}}]":                   "upstreams[0].run_as.gid: is required",
		"upstreams: [{name: a, command: [x], run_as: {uid: -1, gid: 1}}]":             "upstreams[0].run_as.uid: must be 0 to",
		"upstreams: [{name: a, command: [x], run_as: {uid: 1, gid: 4294967295}}]":     "upstreams[0].run_as.gid: must be 0 to",
		"upstreams: [{name: a, command: [x], run_as: {uid: 1, gid: 1}, env: {A: b}}]": "",
	} {
		_, err := ParseConfig([]byte(yaml))
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("ParseConfig(%s) = %v, want %q", yaml, err, want)
		}
	}
}
