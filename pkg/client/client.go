// Package client is what workers import to ask breakerd before a tool call
// and to report after it.
//
// The two-step form is Allow then Record; Do wraps both around one call:
//
//	c, err := client.Dial("127.0.0.1:7070", client.WithWorkerID("worker-7"))
//	...
//	err = c.Do(ctx, "web_search", func(ctx context.Context) error {
//		return search(ctx, query) // its own retries stay inside: one call, one outcome
//	})
//	var open *client.CircuitOpenError
//	if errors.As(err, &open) {
//		// the dependency was not called; tell the model open.Reason
//	}
//
// The package imports only grpc and the generated breakerd.v1 stubs.
package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Client talks to breakerd for one worker. It is safe for concurrent use.
type Client struct {
	conn     *grpc.ClientConn // nil when built by New
	api      pb.BreakerServiceClient
	worker   string
	classify Classifier
}

// Option configures a Client.
type Option func(*Client, *[]grpc.DialOption)

// WithWorkerID sets the id this worker reports as. Default: the host name
// and process id ("host-1234"). Quorum counts distinct worker ids, so two
// processes must not share one.
func WithWorkerID(id string) Option {
	return func(c *Client, _ *[]grpc.DialOption) { c.worker = id }
}

// WithDialOptions adds grpc dial options (TLS credentials, interceptors).
// Without transport credentials among them, Dial connects in plaintext.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(_ *Client, d *[]grpc.DialOption) { *d = append(*d, opts...) }
}

// WithClassifier replaces how Do turns a call's error into an outcome.
// Default: DefaultClassifier.
func WithClassifier(cl Classifier) Option {
	return func(c *Client, _ *[]grpc.DialOption) { c.classify = cl }
}

// Dial returns a Client for the daemon at target ("host:port", or any
// grpc target). It does not wait for a connection.
func Dial(target string, opts ...Option) (*Client, error) {
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	c := newClient(opts, &dial)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", target, err)
	}
	c.conn = conn
	c.api = pb.NewBreakerServiceClient(conn)
	return c, nil
}

// New returns a Client over an existing connection; Close leaves it open.
func New(conn grpc.ClientConnInterface, opts ...Option) *Client {
	var ignored []grpc.DialOption
	c := newClient(opts, &ignored)
	c.api = pb.NewBreakerServiceClient(conn)
	return c
}

func newClient(opts []Option, dial *[]grpc.DialOption) *Client {
	host, _ := os.Hostname()
	c := &Client{worker: fmt.Sprintf("%s-%d", host, os.Getpid()), classify: DefaultClassifier}
	for _, o := range opts {
		o(c, dial)
	}
	return c
}

// Close closes the connection Dial opened.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// WorkerID returns the id this client reports as.
func (c *Client) WorkerID() string { return c.worker }

// API returns the raw breakerd.v1 stub, for Get, List, Force and Watch.
func (c *Client) API() pb.BreakerServiceClient { return c.api }

// Permit is breakerd's answer to Allow.
type Permit struct {
	// Breaker is the dependency asked about.
	Breaker string
	// Decision is ALLOWED, PROBE or one of the DENIED_* values.
	Decision pb.Decision
	// Ticket goes back with Record.
	Ticket *pb.Ticket
	// RetryAfter is, for a denial, how long until asking again can help.
	RetryAfter time.Duration
	// Reason is, for a denial, why in plain words.
	Reason string
	// State is the breaker's state when it answered.
	State *pb.BreakerState
}

// Allowed reports whether the call may go out (ALLOWED or PROBE).
func (p *Permit) Allowed() bool {
	return p.Decision == pb.Decision_DECISION_ALLOWED || p.Decision == pb.Decision_DECISION_PROBE
}

// Allow asks whether a call to breaker may go out. A denial is a Permit
// with Allowed() false, not an error; errors are gRPC failures
// (InvalidArgument for a bad name, Unavailable when breakerd or its Redis
// is down).
func (c *Client) Allow(ctx context.Context, breaker string) (*Permit, error) {
	res, err := c.api.Allow(ctx, &pb.AllowRequest{Breaker: breaker, WorkerId: c.worker})
	if err != nil {
		return nil, err
	}
	return &Permit{
		Breaker:    breaker,
		Decision:   res.GetDecision(),
		Ticket:     res.GetTicket(),
		RetryAfter: time.Duration(res.GetRetryAfterMs()) * time.Millisecond,
		Reason:     res.GetReason(),
		State:      res.GetState(),
	}, nil
}

// Result is the outcome of one tool call, after its own retries.
type Result struct {
	Outcome pb.Outcome
	// RetryAfter is the dependency's Retry-After, with OUTCOME_RATE_LIMITED.
	RetryAfter time.Duration
	// Deadline is the caller's remaining time budget, with
	// OUTCOME_RATE_LIMITED: the 429 counts when RetryAfter exceeds it.
	Deadline time.Duration
	// Latency is how long the call took, retries included.
	Latency time.Duration
	// Message is a short description of a failure ("HTTP 503"); never a
	// payload or a secret.
	Message string
}

// Record reports the result of the call p admitted.
func (c *Client) Record(ctx context.Context, p *Permit, r Result) (*pb.RecordResponse, error) {
	msg := r.Message
	if len(msg) > 256 {
		msg = msg[:256]
	}
	return c.api.Record(ctx, &pb.RecordRequest{
		Breaker:      p.Breaker,
		WorkerId:     c.worker,
		Ticket:       p.Ticket,
		Outcome:      r.Outcome,
		RetryAfterMs: r.RetryAfter.Milliseconds(),
		DeadlineMs:   r.Deadline.Milliseconds(),
		LatencyMs:    r.Latency.Milliseconds(),
		Message:      msg,
	})
}

// recordTimeout bounds the Record that Do sends after fn returns, which
// runs even when the caller's context has ended.
const recordTimeout = 2 * time.Second

// Do asks breakerd, runs fn if allowed, and records fn's outcome as the
// classifier reads its error. It returns fn's error unchanged, or, when the
// call was denied, a *CircuitOpenError or *ProbeInFlightError without
// running fn. A failure to reach breakerd is returned as is and fn is not
// run. A failure to Record is joined to fn's result.
func (c *Client) Do(ctx context.Context, breaker string, fn func(ctx context.Context) error) error {
	p, err := c.Allow(ctx, breaker)
	if err != nil {
		return fmt.Errorf("client: allow %s: %w", breaker, err)
	}
	if !p.Allowed() {
		return DeniedError(p)
	}
	start := time.Now()
	callErr := fn(ctx)
	r, ok := c.classify(ctx, callErr)
	if !ok {
		return callErr
	}
	r.Latency = time.Since(start)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if _, err := c.Record(rctx, p, r); err != nil {
		return errors.Join(callErr, fmt.Errorf("client: record %s: %w", breaker, err))
	}
	return callErr
}
