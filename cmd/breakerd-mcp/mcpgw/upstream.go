package mcpgw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// upstream is one connection to an upstream MCP server, shared by every
// downstream session. It connects on first use and again after the
// connection breaks (a command that exited is started again). It is safe
// for concurrent use.
type upstream struct {
	cfg     Upstream
	isError pb.Outcome
	impl    *mcp.Implementation
	stderr  io.Writer
	sandbox sandbox // how a command starts

	mu sync.Mutex // held while connecting: one connection attempt at a time
	cs *mcp.ClientSession
}

// session returns the live connection, connecting (within the connect
// timeout, and ctx) when there is none.
func (u *upstream) session(ctx context.Context) (*mcp.ClientSession, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.cs != nil {
		return u.cs, nil
	}
	ctx, cancel := context.WithTimeout(ctx, u.cfg.connectTimeout())
	defer cancel()
	t, err := u.transport()
	if err != nil {
		return nil, err
	}
	cs, err := mcp.NewClient(u.impl, nil).Connect(ctx, t, nil)
	if err != nil {
		return nil, fmt.Errorf("connect to upstream %s: %w", u.cfg.Name, err)
	}
	u.cs = cs
	go func() {
		_ = cs.Wait()
		u.forget(cs)
	}()
	return cs, nil
}

// forget drops cs if it is still the live connection, so that the next
// call connects again.
func (u *upstream) forget(cs *mcp.ClientSession) {
	u.mu.Lock()
	if u.cs == cs {
		u.cs = nil
	}
	u.mu.Unlock()
}

// transport is a new transport to the upstream; a command's starts it
// (in the sandbox, as its user).
func (u *upstream) transport() (mcp.Transport, error) {
	switch {
	case u.cfg.Transport != nil:
		return u.cfg.Transport(), nil
	case u.cfg.URL != "":
		return &mcp.StreamableClientTransport{Endpoint: u.cfg.URL,
			HTTPClient: &http.Client{Transport: statusTransport{http.DefaultTransport}}}, nil
	}
	cmd, err := u.sandbox.command(u.cfg)
	if err != nil {
		return nil, err
	}
	cmd.Env = u.cfg.environ(os.LookupEnv) // never the whole environment: the gateway's token is in it
	cmd.Stderr = u.stderr
	return &mcp.CommandTransport{Command: cmd}, nil
}

// tools lists the upstream's tools, every page, within the connect
// timeout and then the call timeout, up to its max_tools; more reports
// that the listing went on past them (it is read no further).
func (u *upstream) tools(ctx context.Context) (out []*mcp.Tool, more bool, err error) {
	cs, err := u.session(ctx)
	if err != nil {
		return nil, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, u.cfg.timeout())
	defer cancel()
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			u.breakOff(cs, err)
			return nil, false, fmt.Errorf("list tools of upstream %s: %w", u.cfg.Name, err)
		}
		if len(out) == u.cfg.maxTools() {
			return out, true, nil
		}
		out = append(out, t)
	}
	return out, false, nil
}

// call calls the upstream's tool: connecting first if need be (within
// the connect timeout), then the call within its timeout, whose deadline
// goes to the call's deadline box for classify. An isError result comes
// back as the result and a *client.OutcomeError with the configured
// outcome, so that the breaker counts it while the agent still sees the
// upstream's words.
func (u *upstream) call(ctx context.Context, tool string, args json.RawMessage) (*mcp.CallToolResult, error) {
	cs, err := u.session(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, u.cfg.timeout())
	defer cancel()
	if box, ok := ctx.Value(deadlineKey{}).(*deadlineBox); ok {
		dl, _ := ctx.Deadline()
		box.set(dl)
	}
	params := &mcp.CallToolParams{Name: tool}
	if len(args) > 0 {
		params.Arguments = args
	}
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		u.breakOff(cs, err)
		return nil, err
	}
	if res.IsError {
		return res, &client.OutcomeError{Outcome: u.isError, Message: "upstream " + u.cfg.Name + ": tool " + tool + " returned isError"}
	}
	return res, nil
}

// deadlineBox carries a call's own deadline (after connecting) to
// classify, which compares a 429's Retry-After with it.
type deadlineBox struct {
	mu sync.Mutex
	t  time.Time
}

type deadlineKey struct{}

func (b *deadlineBox) set(t time.Time) {
	b.mu.Lock()
	b.t = t
	b.mu.Unlock()
}

func (b *deadlineBox) get() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.t
}

// breakOff closes a connection whose call failed in a way that leaves it
// unusable or out of step: a transport failure or a timeout (a hung
// upstream may answer late, or never). A JSON-RPC error object or an HTTP
// status is an answer: the connection stays.
func (u *upstream) breakOff(cs *mcp.ClientSession, err error) {
	var we *jsonrpc.Error
	var he *client.HTTPError
	if errors.As(err, &we) || errors.As(err, &he) || errors.Is(err, context.Canceled) {
		return
	}
	u.forget(cs)
	go func() { _ = cs.Close() }() // a hung command may take its terminate delay
}

func (u *upstream) close() {
	u.mu.Lock()
	cs := u.cs
	u.cs = nil
	u.mu.Unlock()
	if cs != nil {
		_ = cs.Close()
	}
}

// codeRejected is the SDK's "rejected by transport" error code: the
// request did not reach the upstream, or its HTTP answer was a failure
// status; the cause further down the chain says which.
const codeRejected = -32005

// classify is the gateway's Classifier. In order: an HTTP status from a
// Streamable HTTP upstream (*client.HTTPError: 429 with its Retry-After,
// 5xx) as client.DefaultClassifier reads it; a JSON-RPC error object from
// the upstream is its answer (a bad request from the model,
// INVALID_ARGUMENT, is not counted; any other code is SERVER_ERROR); a
// closed connection is TRANSPORT; everything else (isError results as
// *client.OutcomeError, timeouts, refused connections) as
// client.DefaultClassifier reads it, except that an error it cannot name
// is TRANSPORT: the upstream's own failures arrive as isError results or
// JSON-RPC errors, so any other error is the SDK's transport failing.
func classify(ctx context.Context, err error) (client.Result, bool) {
	var (
		he *client.HTTPError
		we *jsonrpc.Error
	)
	switch {
	case errors.As(err, &he):
		r, ok := client.DefaultClassifier(ctx, err)
		// The time left is the call's own, not its connect budget's.
		if box, boxed := ctx.Value(deadlineKey{}).(*deadlineBox); boxed && r.Outcome == pb.Outcome_OUTCOME_RATE_LIMITED {
			if dl := box.get(); !dl.IsZero() {
				r.Deadline = max(0, time.Until(dl))
			}
		}
		return r, ok
	case errors.As(err, &we) && we.Code != codeRejected:
		r := client.Result{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: fmt.Sprintf("JSON-RPC error %d", we.Code)}
		switch we.Code {
		case jsonrpc.CodeInvalidParams, jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidRequest:
			r.Outcome = pb.Outcome_OUTCOME_INVALID_ARGUMENT
		}
		return r, true
	case errors.Is(err, mcp.ErrConnectionClosed):
		return client.Result{Outcome: pb.Outcome_OUTCOME_TRANSPORT, Message: "upstream connection closed"}, true
	}
	r, ok := client.DefaultClassifier(ctx, err)
	if r.Outcome == pb.Outcome_OUTCOME_UNRECOGNISED {
		r.Outcome = pb.Outcome_OUTCOME_TRANSPORT
	}
	return r, ok
}

// statusTransport turns a Streamable HTTP upstream's 429 and 5xx answers
// to a POST into a *client.HTTPError (with Retry-After), which the SDK
// passes up the call's error chain and DefaultClassifier reads. Other
// statuses, and GET streams, are left to the SDK.
type statusTransport struct{ next http.RoundTripper }

func (t statusTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost {
		return resp, err
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		herr := client.CheckResponse(resp)
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		return nil, herr
	}
	return resp, nil
}
