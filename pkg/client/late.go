package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// recordLate sends r, the outcome of a call the fallback let through
// because breakerd's answer missed its budget, to breakerd once that
// answer has come (in the background, waiting at most the RPC timeout
// for it): a slow daemon still gets every worker's evidence. The ticket
// is breakerd's answer's when it was ALLOWED, else only its generation
// (a denial the fallback overrode; a PROBE whose lease was handed back).
// The local breaker already holds r.
func (c *Client) recordLate(p *Permit, r Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTimer(c.o.rpcTimeout)
		defer t.Stop()
		select {
		case <-p.late.done:
		case <-t.C:
			return
		case <-c.ctx.Done():
			select {
			case <-p.late.done: // came before Close: still sent
			default:
				return
			}
		}
		a := p.late.p
		if a == nil {
			return // breakerd never answered: the local breaker has it
		}
		q := &Permit{Breaker: p.Breaker, Decision: pb.Decision_DECISION_ALLOWED, Ticket: a.Ticket, localHas: true}
		if a.Decision != pb.Decision_DECISION_ALLOWED || a.Ticket == nil {
			gen := a.Ticket.GetGeneration()
			if a.Ticket == nil {
				gen = a.State.GetGeneration()
			}
			q.Ticket = &pb.Ticket{Generation: gen}
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.o.recordTimeout)
		defer cancel()
		if _, err := c.Record(ctx, q, r); err != nil {
			c.log("client: sending the outcome of a call breakerd answered late", err)
		}
	}()
}

// Check asks breakerd whether it serves (grpc.health.v1), within ctx and
// the RPC timeout: the loud check for a client pointed at the wrong
// address, since Allow never fails for want of breakerd. It returns an
// error naming the target when no daemon answers, or when the one that
// answers does not serve (NOT_SERVING: it cannot reach its Redis and
// answers from memory, or it is shutting down).
func (c *Client) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.o.rpcTimeout)
	defer cancel()
	target := c.target
	if target == "" {
		target = "the connection given to New"
	}
	res, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("client: no breakerd answers at %s: %w", target, err)
	}
	c.noteReach(nil)
	if st := res.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("client: breakerd at %s answers %s: it cannot reach its Redis, or is shutting down", target, st)
	}
	return nil
}

// settle records r, the outcome of the call p admitted, for Call. With no
// round trip to make (a degraded permit; fast mode's queue) it is record.
// Otherwise the Record goes out in the background, detached from ctx and
// bounded by the record timeout from now, and settle waits for its answer
// as long as an Allow waits for breakerd's (the Allow budget; with
// WithAllowBudget(0), the record timeout), never past ctx's deadline. A
// cancelled ctx does not end the wait: a probe's CANCELED has handed its
// lease back when Call returns, unless breakerd is slower than the budget.
// A daemon that freezes between the Allow and the Record thus does not
// hold fn's result back, and still gets the outcome (a probe's settles
// its lease) once it answers. inTime is false when the wait ended first; a
// failure that comes after it is logged. Close waits for Records in flight.
func (c *Client) settle(ctx context.Context, p *Permit, r Result) (res *pb.RecordResponse, err error, inTime bool) {
	if p.Degraded || c.out != nil {
		res, err = c.record(context.WithoutCancel(ctx), p, r)
		return res, err, true
	}
	type answer struct {
		res *pb.RecordResponse
		err error
	}
	ch := make(chan answer, 1)
	var mu sync.Mutex
	waiting := true
	send := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.o.recordTimeout)
		defer cancel()
		res, err := c.record(rctx, p, r)
		mu.Lock()
		w := waiting
		ch <- answer{res, err}
		mu.Unlock()
		if !w && err != nil {
			c.log("client: recording the outcome of a call that has returned", err)
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		send()
		a := <-ch
		return a.res, a.err, true
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		send()
	}()
	var timer <-chan time.Time
	if b := c.o.budget; b > 0 {
		t, stop := c.o.after(p.Breaker, b)
		defer stop()
		timer = t
	}
	for done := ctx.Done(); ; {
		select {
		case a := <-ch:
			return a.res, a.err, true
		case <-timer:
		case <-done:
			if !deadlinePassed(ctx) {
				done = nil // cancelled: a probe's lease is still handed back within the budget
				continue
			}
		}
		break
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case a := <-ch: // it answered as the wait ended
		return a.res, a.err, true
	default:
	}
	waiting = false
	return nil, nil, false
}
