package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/store"
)

// Limits are per-token quotas, kept by each daemon on its own (a fleet of
// N daemons admits up to N times them). Zero means no quota.
type Limits struct {
	// NewBreakersPerMinute is how many breakers one token may name that
	// this daemon has not seen and that hold no state in Redis, per
	// minute, with a burst of as many. Past it Allow and Record answer
	// ResourceExhausted: a token cannot fill Redis, the log and the
	// webhooks with made-up breakers.
	NewBreakersPerMinute int
	// AlertsPerMinute is how many of the alerts one token's Records raise
	// (every kind: credential_revoked, quota_exhausted, suspect_worker,
	// stuck_open, ...) hooks send per minute, with a burst of as many.
	// Past it the Records go on, never refused, and their alerts are
	// logged marked quiet (store.AlertQuota); hooks send one a minute per
	// token, carrying a summary: how many were not sent since the last.
	AlertsPerMinute int
	// Log receives one summary line per token and minute of what was
	// refused (a burst of 20,000 is a line, not 20,000). Default: none.
	Log *slog.Logger
	// Now is the clock the quotas run on. Default time.Now.
	Now func() time.Time
}

// maxKnown bounds the names a quota remembers as seen; past it the memory
// starts afresh (names are then charged again, once).
const maxKnown = 100_000

// quotas enforces Limits. It is safe for concurrent use.
type quotas struct {
	l Limits

	mu      sync.Mutex
	known   map[string]struct{}
	buckets map[string]*owner
}

// owner is one token's buckets and what was refused since its last
// summary.
type owner struct {
	newBreakers, alerts *rate.Limiter
	refusedNew          int
	summarised          time.Time
	// quiet counts the alerts past the alert quota since the last summary
	// was sent; summary is when the last one was handed out (before: the
	// one before it, restored when a summary raised no alert).
	quiet           int64
	summary, before time.Time
}

func newQuotas(l Limits) *quotas {
	if l.Now == nil {
		l.Now = time.Now
	}
	return &quotas{l: l, known: map[string]struct{}{}, buckets: map[string]*owner{}}
}

func perMinute(n int) *rate.Limiter {
	if n <= 0 {
		return rate.NewLimiter(rate.Inf, 0)
	}
	return rate.NewLimiter(rate.Limit(float64(n)/60), n)
}

// ownerOf returns the caller's token name, "" without tokens.
func ownerOf(ctx context.Context) string {
	id, _ := auth.FromContext(ctx)
	return id.Name
}

func (q *quotas) owner(name string) *owner {
	o := q.buckets[name]
	if o == nil {
		o = &owner{newBreakers: perMinute(q.l.NewBreakersPerMinute), alerts: perMinute(q.l.AlertsPerMinute)}
		q.buckets[name] = o
	}
	return o
}

// admitBreaker charges ctx's token for naming breaker when it is new to
// this daemon. exists, asked only when the token is past its quota, says
// whether the breaker already holds state (then it is not new). It returns
// ResourceExhausted past the quota, or the error of exists.
func (q *quotas) admitBreaker(ctx context.Context, breaker string, exists func() (bool, error)) error {
	if q.l.NewBreakersPerMinute <= 0 {
		return nil
	}
	name := ownerOf(ctx)
	q.mu.Lock()
	if _, ok := q.known[breaker]; ok {
		q.mu.Unlock()
		return nil
	}
	ok := q.owner(name).newBreakers.AllowN(q.l.Now(), 1)
	if ok {
		q.remember(breaker)
	}
	q.mu.Unlock()
	if ok {
		return nil
	}
	found, err := exists()
	if err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if found {
		q.remember(breaker)
		return nil
	}
	q.refused(name, func(o *owner) { o.refusedNew++ })
	return status.Errorf(codes.ResourceExhausted,
		"breaker: token %q named more than %d new breakers in a minute on this daemon; retry later, or ask an operator to raise --new-breakers-per-minute",
		name, q.l.NewBreakersPerMinute)
}

// Quiet implements store.AlertQuota: "" while ctx's token is within its
// alert quota; past it a summary mark (store.SummaryMark) once a minute,
// else breaker.QuietMark.
func (q *quotas) Quiet(ctx context.Context) string {
	if q.l.AlertsPerMinute <= 0 {
		return ""
	}
	name := ownerOf(ctx)
	q.mu.Lock()
	defer q.mu.Unlock()
	o, now := q.owner(name), q.l.Now()
	switch {
	case o.alerts.TokensAt(now) >= 1:
		return ""
	case o.summary.IsZero() || now.Sub(o.summary) >= time.Minute:
		o.before, o.summary = o.summary, now
		return store.SummaryMark(o.quiet+1, name)
	}
	return breaker.QuietMark
}

// Raised implements store.AlertQuota: it charges ctx's token for the
// alerts a Record raised under mark.
func (q *quotas) Raised(ctx context.Context, mark string, alerts int64) {
	if q.l.AlertsPerMinute <= 0 {
		return
	}
	name := ownerOf(ctx)
	q.mu.Lock()
	defer q.mu.Unlock()
	o, now := q.owner(name), q.l.Now()
	switch {
	case mark == "":
		if alerts > 0 {
			o.alerts.ReserveN(now, int(alerts)) // into debt when a few raced past the last one
		}
	case mark == breaker.QuietMark:
		o.quiet += alerts
	case alerts == 0: // a summary mark on a Record that raised nothing: the next alert carries it
		o.summary = o.before
	default: // the summary went out with the counted alerts: the count starts again
		n, _, _ := store.ParseSummary(mark)
		if q.l.Log != nil {
			q.l.Log.Warn("quota: alerts past the quota summarised", "token", name, "alerts_not_sent", n,
				"alerts_per_minute", q.l.AlertsPerMinute)
		}
		o.quiet += alerts - n
	}
}

// remember adds breaker to the names seen. Callers hold q.mu.
func (q *quotas) remember(breaker string) {
	if len(q.known) >= maxKnown {
		clear(q.known)
	}
	q.known[breaker] = struct{}{}
}

// refused counts a refusal for token name and logs the summary of its
// refusals at most once a minute. Callers hold q.mu.
func (q *quotas) refused(name string, count func(*owner)) {
	o := q.owner(name)
	count(o)
	now := q.l.Now()
	if q.l.Log == nil || now.Sub(o.summarised) < time.Minute {
		return
	}
	q.l.Log.Warn("quota: calls refused", "token", name,
		"new_breakers_refused", o.refusedNew, "new_breakers_per_minute", q.l.NewBreakersPerMinute)
	o.refusedNew, o.summarised = 0, now
}
