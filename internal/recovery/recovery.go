// Package recovery runs the policies' recovery checks: while a breaker is
// open, one daemon fleet-wide sends a cheap request to its dependency
// (an HTTP status endpoint or a gRPC health check) every
// recovery_check_interval, and a success moves the breaker to half-open at
// once, so the next real call is the probe. A failed check changes
// nothing: the cooldown schedule and the backoff level stay as they were.
//
// The daemon learns which breakers are open from the events its hub hears
// (Observe) and, once at start, from a List of open breakers (Seed). Which
// daemon checks is decided in Redis (store.TakeCheckLease: a lease in the
// breaker's slot, one grant per interval fleet-wide); the transition is
// store.Recover, an event as usual. Checks themselves are counted in
// metrics and logged at debug level; they are not events.
//
// The policy fields and what the fleet sees: docs/policies.md (Recovery checks).
package recovery

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Clock is the time the check timers run on. Tests drive a virtual one.
type Clock interface {
	Now() time.Time
	// At returns a channel that receives once the clock reads t or later
	// (at once when it already does). A timer set by its instant, not by
	// a duration from a Now read before it, cannot miss a clock that moved
	// in between.
	At(t time.Time) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                  { return time.Now() }
func (systemClock) At(t time.Time) <-chan time.Time { return time.After(time.Until(t)) }

// Jitter bounds: each daemon waits between 1.02 and 1.10 intervals between
// two attempts on a breaker, never less than one interval (the lease in
// Redis lasts exactly one), with a 2% margin for the round trip that took
// the previous grant.
const (
	minJitter = 0.02
	maxJitter = 0.10
)

// DefaultMaxConcurrent bounds the checks one daemon runs at once.
const DefaultMaxConcurrent = 16

// Options configure a Checker. The zero value of each field means its
// default.
type Options struct {
	// Store runs the lease and the transition. Required.
	Store *store.Store
	// ID names this daemon in the lease and as the actor of the
	// transitions it causes. Required; unique in the fleet.
	ID string
	// Log receives a debug line per check, and a warning when a check's
	// target cannot be reached at all. Default: discard.
	Log *slog.Logger
	// Clock runs the check timers. Default: the system clock.
	Clock Clock
	// Rand draws the timers' jitter, uniform in [0, 1). Default
	// math/rand/v2.Float64.
	Rand func() float64
	// MaxConcurrent bounds the checks in flight on this daemon; a breaker
	// due while the bound is reached is skipped until its next turn.
	// Default DefaultMaxConcurrent.
	MaxConcurrent int
	// Registerer, when set, gets breakerd_recovery_checks_total.
	Registerer prometheus.Registerer
	// HTTPTransport sends HTTP checks. Default: a clone of
	// http.DefaultTransport (no keep-alives, so every check dials).
	HTTPTransport http.RoundTripper
}

// Checker runs recovery checks for the breakers this daemon knows to be
// open. It is safe for concurrent use.
type Checker struct {
	o      Options
	log    *slog.Logger
	sem    chan struct{}
	wake   chan struct{}
	client *http.Client
	checks *prometheus.CounterVec

	mu   sync.Mutex
	open map[string]*entry

	// Counters tests wait on (Stats).
	rounds, granted, checked, recovered, skipped atomic.Int64
}

// entry is one open breaker this daemon knows of.
type entry struct {
	gen int64     // generation it opened at, from its event
	due time.Time // next attempt, on Clock
	// unreachable is set once a check could not reach the target at all,
	// so the misconfiguration warning is logged once, not every interval.
	unreachable bool
}

// Stats are a Checker's counts since it was made.
type Stats struct {
	// Rounds counts attempts: a breaker's timer fired and this daemon
	// decided (asked for the lease, or skipped).
	Rounds int64
	// Granted counts leases this daemon took, Checked checks it finished,
	// Recovered breakers its checks half-opened; Skipped counts leases
	// given up because the check's target was checked within the
	// interval (for another breaker, by any daemon).
	Granted, Checked, Recovered, Skipped int64
}

// New returns a Checker. Run starts it.
func New(o Options) (*Checker, error) {
	if o.Store == nil || o.ID == "" {
		return nil, errors.New("recovery: Store and ID are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.HTTPTransport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DisableKeepAlives = true
		o.HTTPTransport = t
	}
	c := &Checker{o: o, log: o.Log, sem: make(chan struct{}, o.MaxConcurrent), wake: make(chan struct{}, 1),
		open: map[string]*entry{},
		client: &http.Client{Transport: o.HTTPTransport,
			// A redirect's status is the answer: a check follows nothing.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "breakerd", Name: "recovery_checks_total",
			Help: "Recovery checks this daemon ran, by result: success (the vendor answered as expected), failure " +
				"(it answered otherwise, or timed out), unreachable (DNS or connection refused: likely misconfiguration), " +
				"skipped (this daemon's bound on concurrent checks was reached)."},
			[]string{"result"})}
	for _, r := range []string{"success", "failure", "unreachable", "skipped"} {
		c.checks.WithLabelValues(r)
	}
	if o.Registerer != nil {
		if err := o.Registerer.Register(c.checks); err != nil {
			return nil, fmt.Errorf("recovery: metrics: %w", err)
		}
	}
	return c, nil
}

// Stats returns the Checker's counts.
func (c *Checker) Stats() Stats {
	return Stats{Rounds: c.rounds.Load(), Granted: c.granted.Load(), Checked: c.checked.Load(), Recovered: c.recovered.Load(), Skipped: c.skipped.Load()}
}

// Observe feeds the Checker one event (events.Hub.Observe): a transition
// to open adds the breaker, its first check due one interval later; any
// other state removes it. It never blocks.
func (c *Checker) Observe(e *pb.Event) {
	name := e.GetBreaker()
	c.mu.Lock()
	switch to := e.GetTo(); to {
	case pb.State_STATE_OPEN:
		// An alert about an open breaker (stuck_open) keeps its timer.
		if cur, ok := c.open[name]; !ok || cur.gen != e.GetGeneration() {
			c.open[name] = &entry{gen: e.GetGeneration(), due: c.next(name)}
		}
	case pb.State_STATE_UNSPECIFIED:
	default:
		delete(c.open, name)
	}
	c.mu.Unlock()
	c.poke()
}

// Seed adds breakers known to be open (store.List at start).
func (c *Checker) Seed(states []*pb.BreakerState) {
	c.mu.Lock()
	for _, s := range states {
		if s.GetState() == pb.State_STATE_OPEN {
			if _, ok := c.open[s.GetBreaker()]; !ok {
				c.open[s.GetBreaker()] = &entry{gen: s.GetGeneration(), due: c.next(s.GetBreaker())}
			}
		}
	}
	c.mu.Unlock()
	c.poke()
}

// Open returns how many open breakers this daemon tracks.
func (c *Checker) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.open)
}

func (c *Checker) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// next is when a breaker's next attempt is due: one interval of its policy
// from now, plus 2 to 10% jitter.
func (c *Checker) next(name string) time.Time {
	iv := c.o.Store.Policy(name).CheckInterval()
	j := minJitter + (maxJitter-minJitter)*c.o.Rand()
	return c.o.Clock.Now().Add(iv + time.Duration(float64(iv)*j))
}

// Run attempts every open breaker's check when it is due until ctx ends,
// then waits for the checks in flight (each bounded by its timeout).
func (c *Checker) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		var wait <-chan time.Time
		if d, ok := c.earliest(); ok {
			wait = c.o.Clock.At(d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.wake:
			continue
		case <-wait:
		}
		for _, name := range c.due(c.o.Clock.Now()) {
			select {
			case c.sem <- struct{}{}:
			default:
				c.checks.WithLabelValues("skipped").Inc()
				c.log.Debug("recovery check skipped: this daemon's bound on concurrent checks is reached",
					"breaker", name, "max_concurrent", c.o.MaxConcurrent)
				c.rounds.Add(1)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-c.sem }()
				c.attempt(ctx, name)
			}()
		}
	}
}

// Step runs, and waits for, the attempts due now on Clock, within the
// bound on concurrent checks, and returns when the next attempt is due (ok
// false: no open breaker is known). It is Run for a caller that moves
// time itself and must know when the Checker is idle: the outage replay,
// whose virtual clock moves only while every actor sleeps. Do not call it
// while Run runs.
func (c *Checker) Step(ctx context.Context) (next time.Time, ok bool) {
	var wg sync.WaitGroup
	for _, name := range c.due(c.o.Clock.Now()) {
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return time.Time{}, false
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-c.sem }()
			c.attempt(ctx, name)
		}()
	}
	wg.Wait()
	return c.earliest()
}

// earliest returns the earliest due time of an open breaker.
func (c *Checker) earliest() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var t time.Time
	for _, e := range c.open {
		if t.IsZero() || e.due.Before(t) {
			t = e.due
		}
	}
	return t, !t.IsZero()
}

// due returns the breakers due at now, their next attempt scheduled.
func (c *Checker) due(now time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for name, e := range c.open {
		if !e.due.After(now) {
			e.due = c.next(name)
			out = append(out, name)
		}
	}
	return out
}

// attempt takes the lease and, when granted, runs one check; a success
// half-opens the breaker.
func (c *Checker) attempt(ctx context.Context, name string) {
	defer c.rounds.Add(1)
	p := c.o.Store.Policy(name)
	if p.RecoveryCheck == nil {
		// No check configured (or a reload removed it): today's
		// behaviour, no Redis call; and the breaker is not kept, so the
		// view holds only breakers with a check (it is heard again at its
		// next open).
		c.mu.Lock()
		delete(c.open, name)
		c.mu.Unlock()
		return
	}
	lctx, cancel := context.WithTimeout(ctx, p.RecoveryCheck.Timeout)
	lease, err := c.o.Store.TakeCheckLease(lctx, name, c.o.ID, p.CheckInterval())
	cancel()
	if err != nil {
		c.log.Debug("recovery check: lease not taken (Redis)", "breaker", name, "err", err)
		return
	}
	if lease.State != "open" {
		c.forget(name, lease.Gen)
		return
	}
	if !lease.Granted {
		return
	}
	// However many open breakers share the target, it is checked at most
	// once an interval fleet-wide: opening breakers must not multiply the
	// requests a vendor's status page receives.
	lctx, cancel = context.WithTimeout(ctx, p.RecoveryCheck.Timeout)
	first, err := c.o.Store.TakeTargetLease(lctx, p.RecoveryCheck.Target(), p.CheckInterval())
	cancel()
	if err != nil || !first {
		c.skipped.Add(1)
		return
	}
	c.granted.Add(1)
	start := time.Now()
	result, detail := c.check(ctx, p.RecoveryCheck)
	c.checked.Add(1)
	c.checks.WithLabelValues(result).Inc()
	c.log.Debug("recovery check", "breaker", name, "check", p.RecoveryCheck.Describe(), "result", result,
		"detail", detail, "latency", time.Since(start))
	c.noteReach(name, p.RecoveryCheck, result, detail)
	if result != "success" {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.RecoveryCheck.Timeout)
	defer cancel()
	moved, _, err := c.o.Store.Recover(rctx, name, c.o.ID, lease.Gen)
	if err != nil {
		c.log.Warn("recovery check succeeded but the breaker could not be half-opened (Redis)", "breaker", name, "err", err)
		return
	}
	if moved {
		c.recovered.Add(1)
	}
}

// forget drops a breaker the lease found no longer open, unless a newer
// open was heard meanwhile.
func (c *Checker) forget(name string, gen int64) {
	c.mu.Lock()
	if e, ok := c.open[name]; ok && e.gen <= gen {
		delete(c.open, name)
	}
	c.mu.Unlock()
}

// noteReach logs, once until a check reaches it again, that a check's
// target cannot be reached at all: that is the check's configuration (or
// this daemon's network), not the vendor failing.
func (c *Checker) noteReach(name string, rc *policy.RecoveryCheck, result, detail string) {
	c.mu.Lock()
	e, ok := c.open[name]
	first := ok && result == "unreachable" && !e.unreachable
	if ok {
		e.unreachable = result == "unreachable"
	}
	c.mu.Unlock()
	if first {
		c.log.Warn("recovery check cannot reach its target at all (DNS failure or connection refused): "+
			"likely a misconfigured recovery_check, not the vendor failing; the breaker keeps its cooldown schedule",
			"breaker", name, "check", rc.Describe(), "err", detail)
	}
}

// check runs rc once within its timeout: "success", "failure" or
// "unreachable", and a detail free of credentials.
func (c *Checker) check(ctx context.Context, rc *policy.RecoveryCheck) (result, detail string) {
	ctx, cancel := context.WithTimeout(ctx, rc.Timeout)
	defer cancel()
	if rc.GRPC != nil {
		return c.checkGRPC(ctx, rc.GRPC)
	}
	return c.checkHTTP(ctx, rc.HTTP)
}

func (c *Checker) checkHTTP(ctx context.Context, h *policy.HTTPCheck) (string, string) {
	req, err := http.NewRequestWithContext(ctx, h.Method, h.URL, nil)
	if err != nil {
		return "unreachable", "bad request: " + policy.RedactURL(h.URL)
	}
	for k, v := range h.Headers {
		req.Header.Set(k, v)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return classify(err), safeErr(err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode == h.ExpectStatus {
		return "success", fmt.Sprintf("HTTP %d", resp.StatusCode)
	}
	return "failure", fmt.Sprintf("HTTP %d, want %d", resp.StatusCode, h.ExpectStatus)
}

func (c *Checker) checkGRPC(ctx context.Context, g *policy.GRPCCheck) (string, string) {
	creds := credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	if g.Plaintext {
		creds = insecure.NewCredentials()
	}
	var dialed dialErr
	target, opts := g.Target, []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if u, err := url.Parse(target); err != nil || resolver.Get(u.Scheme) == nil {
		// host:port: dialed here (its name resolved by the dial), so that
		// the dial's own error says whether the target could be reached.
		target, opts = "passthrough:///"+target, append(opts, grpc.WithContextDialer(dialed.dial))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return "unreachable", "bad target: " + err.Error()
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: g.Service}, grpc.WaitForReady(false))
	if err != nil {
		if status.Code(err) == codes.Unavailable && dialed.unreachable() {
			return "unreachable", err.Error()
		}
		return "failure", err.Error()
	}
	if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
		return "success", "SERVING"
	}
	return "failure", resp.GetStatus().String()
}

// dialErr keeps a check connection's last dial error: an RPC that fails
// Unavailable is told apart by its cause (a target with a scheme of its
// own, dialed by grpc-go's resolvers, always reads as merely failed).
type dialErr struct {
	mu  sync.Mutex
	err error
}

func (d *dialErr) dial(ctx context.Context, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		d.mu.Lock()
		d.err = err
		d.mu.Unlock()
	}
	return conn, err
}

// unreachable reports whether the last dial found no such host or was
// refused.
func (d *dialErr) unreachable() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err != nil && classify(d.err) == "unreachable"
}

// classify says whether err means the target cannot be reached at all
// (no such host, connection refused) or merely failed.
func classify(err error) string {
	var dns *net.DNSError
	if errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED) {
		return "unreachable"
	}
	return "failure"
}

// safeErr renders err without the request's URL (which may carry
// credentials): the transport's own error only.
func safeErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return err.Error()
}
