package client

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/limits"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// DefaultSavingsInterval is how often a client reports the calls it
// refused itself (WithSavingsInterval).
const DefaultSavingsInterval = 10 * time.Second

// maxSavingsHeld bounds the breakers one worker's unsent counts cover
// (while breakerd is unreachable); counts for further breakers are not
// kept until a report goes out.
const maxSavingsHeld = 10_000

// maxSavingsCount is the largest count one report may carry (breakerd's
// bound); a larger tally goes out over several reports.
const maxSavingsCount = 1_000_000

// WithSavingsInterval sets how often the client reports to breakerd the
// calls it refused in its own process (fast mode's view, the open cache)
// and the tools its runs left out, batched in one ReportSavings call per
// worker id: breakerd counts them with its own denials (docs/operations.md,
// "What the breakers saved"). Default DefaultSavingsInterval; Close sends
// what is left. 0 or less: never report.
func WithSavingsInterval(d time.Duration) Option { return func(o *options) { o.savings = d } }

// savingsTally holds what the client saved since its last report, by
// worker id and breaker. It is safe for concurrent use.
type savingsTally struct {
	mu sync.Mutex
	m  map[string]map[string]*pb.SavingsReport
	// sentDenials and sentRemoved count what breakerd acknowledged, for
	// Stats.
	sentDenials, sentRemoved int64
}

// add counts what worker saved on breaker.
func (t *savingsTally) add(worker, breaker string, denials, removed int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]map[string]*pb.SavingsReport{}
	}
	byBreaker := t.m[worker]
	if byBreaker == nil {
		byBreaker = map[string]*pb.SavingsReport{}
		t.m[worker] = byBreaker
	}
	r := byBreaker[breaker]
	if r == nil {
		if len(byBreaker) >= maxSavingsHeld {
			return
		}
		r = &pb.SavingsReport{Breaker: breaker}
		byBreaker[breaker] = r
	}
	r.LocalDenials += denials
	r.ToolsRemoved += removed
}

// take removes and returns one worker's next batch: at most
// limits.MaxBatch breakers, each count at most maxSavingsCount (the rest
// stays for the next batch).
func (t *savingsTally) take() (worker string, batch []*pb.SavingsReport) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for w, byBreaker := range t.m {
		for b, r := range byBreaker {
			if len(batch) == limits.MaxBatch {
				break
			}
			out := &pb.SavingsReport{Breaker: b, LocalDenials: min(r.LocalDenials, maxSavingsCount), ToolsRemoved: min(r.ToolsRemoved, maxSavingsCount)}
			r.LocalDenials -= out.LocalDenials
			r.ToolsRemoved -= out.ToolsRemoved
			if r.LocalDenials == 0 && r.ToolsRemoved == 0 {
				delete(byBreaker, b)
			}
			batch = append(batch, out)
		}
		if len(byBreaker) == 0 {
			delete(t.m, w)
		}
		return w, batch
	}
	return "", nil
}

// putBack returns a batch breakerd did not take (it was unreachable).
func (t *savingsTally) putBack(worker string, batch []*pb.SavingsReport) {
	for _, r := range batch {
		t.add(worker, r.GetBreaker(), r.GetLocalDenials(), r.GetToolsRemoved())
	}
}

// saved counts a call this client refused in its own process.
func (c *Client) saved(p *Permit) *Permit {
	if p != nil && !p.Allowed() && c.o.savings > 0 {
		c.tally.add(c.worker(), p.Breaker, 1, 0)
	}
	return p
}

// removedTool counts a tool a run left out (once per run and tool),
// under the breaker that decided: the parent scope when it did.
func (c *Client) removedTool(u Unavailable) {
	if c.o.savings <= 0 {
		return
	}
	name := u.Breaker
	if u.Scope != "" {
		name = u.Scope
	}
	c.tally.add(c.worker(), name, 0, 1)
}

// reportSavings sends the tally every interval until ctx ends.
func (c *Client) reportSavings(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, c.o.rpcTimeout)
			_ = c.FlushSavings(rctx)
			cancel()
		}
	}
}

// FlushSavings sends what the client saved since its last report now
// (one ReportSavings call per worker id and 1,024 breakers). What
// breakerd could not be reached for stays for the next report; what it
// refuses (a breaker the token may not name) is dropped and returned as
// the error.
func (c *Client) FlushSavings(ctx context.Context) error {
	var refused error
	for {
		worker, batch := c.tally.take()
		if len(batch) == 0 {
			return refused
		}
		_, err := c.api.ReportSavings(ctx, &pb.ReportSavingsRequest{WorkerId: worker, Reports: batch})
		switch {
		case err == nil:
			c.tally.mu.Lock()
			for _, r := range batch {
				c.tally.sentDenials += r.GetLocalDenials()
				c.tally.sentRemoved += r.GetToolsRemoved()
			}
			c.tally.mu.Unlock()
		case reachFailure(err) || status.Code(err) == codes.Unavailable || ctx.Err() != nil:
			c.tally.putBack(worker, batch)
			return err
		default:
			c.log("client: savings report refused", err)
			refused = err
		}
	}
}
