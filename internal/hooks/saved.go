package hooks

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/savings"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Saved is what a breaker saved over the spell an event ends: the calls
// its dependency was not sent from when the breaker began to refuse them
// (the event that took it out of closed or forced_closed) to the event
// that closed it. The counts are read from the savings buckets by the
// minute (by the hour past their retention), so they cover the spell's
// first and last minutes whole; each daemon writes its denials every
// second, so another daemon's denials of the spell's last second may be
// missing. Everything here is an estimate: a refused call may have been
// retried later, or never have been made.
type Saved struct {
	// Summary is the same in words: "open 22m: 3,700 calls refused,
	// ≈ 370.00 USD (estimate)".
	Summary string `json:"summary"`
	// OpenedAtMs is when the spell began, ms since the epoch (Redis
	// clock); OpenMs how long it lasted, to the event's at_ms.
	OpenedAtMs int64 `json:"opened_at_ms"`
	OpenMs     int64 `json:"open_ms"`
	// CallsRefused are the calls not made: DaemonDenials + ClientDenials
	// + ToolsRemoved (their meaning: savings.Counts).
	CallsRefused  int64 `json:"calls_refused"`
	DaemonDenials int64 `json:"daemon_denials"`
	ClientDenials int64 `json:"client_denials"`
	ToolsRemoved  int64 `json:"tools_removed"`
	// SpendAvoidedEstimate is CallsRefused times the policy's
	// cost_per_call, in Currency; both absent when the policy sets no
	// cost_per_call.
	SpendAvoidedEstimate float64 `json:"spend_avoided_estimate,omitempty"`
	Currency             string  `json:"currency,omitempty"`
	// Estimate is always true: the figures are estimates.
	Estimate bool `json:"estimate"`
}

// endsSpell reports whether e ends a spell in which the breaker refused
// calls: an enforced change to closed from a state that refuses them.
func endsSpell(e *pb.Event) bool {
	return !e.GetShadow() && e.GetTo() == pb.State_STATE_CLOSED && e.GetFrom() != e.GetTo() &&
		breaker.Denying(breaker.EnumName(e.GetFrom()))
}

// saved reads what the spell e ends saved, or nil when e ends none or the
// figures cannot be read (the spell's start trimmed from the stream,
// Redis failing: logged), so the delivery goes out without them.
func (d *Dispatcher) saved(ctx context.Context, e *pb.Event) *Saved {
	if !endsSpell(e) {
		return nil
	}
	from, ok, err := d.st.SpellStart(ctx, e.GetBreaker(), e.GetId())
	if err == nil && !ok {
		d.o.Log.Info("hooks: the start of the spell is no longer in the event stream; sending the close without its savings",
			"breaker", e.GetBreaker(), "id", e.GetId())
		return nil
	}
	var c savings.Counts
	if err == nil {
		c, err = d.st.Savings().Between(ctx, e.GetBreaker(), time.UnixMilli(from), time.UnixMilli(e.GetAtMs()))
	}
	if err != nil {
		if ctx.Err() == nil {
			d.o.Log.Warn("hooks: reading what the spell saved failed; sending the close without it", "breaker", e.GetBreaker(), "err", err)
		}
		return nil
	}
	s := &Saved{OpenedAtMs: from, OpenMs: max(0, e.GetAtMs()-from), CallsRefused: c.Calls(),
		DaemonDenials: c.DaemonDenials, ClientDenials: c.ClientDenials, ToolsRemoved: c.ToolsRemoved, Estimate: true}
	s.Summary = fmt.Sprintf("open %s: %s calls refused", spellLength(time.Duration(s.OpenMs)*time.Millisecond), thousands(s.CallsRefused))
	if cost := d.st.Policy(e.GetBreaker()).CostPerCall; cost != nil {
		s.SpendAvoidedEstimate, s.Currency = cost.Estimate(s.CallsRefused), cost.Currency
		s.Summary += ", " + policy.Spend(s.SpendAvoidedEstimate, s.Currency)
	}
	s.Summary += " (estimate)"
	return s
}

// spellLength writes d as a person reads a spell's length: "45s", "22m",
// "3h5m", "2d4h".
func spellLength(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int64(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int64(d/time.Minute))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int64(d/time.Hour), int64(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%dh", int64(d/(24*time.Hour)), int64(d%(24*time.Hour)/time.Hour))
}

// thousands writes n with a comma between groups of three digits: 3,700.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
