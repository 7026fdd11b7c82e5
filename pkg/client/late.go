package client

import (
	"context"
	"time"

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
			return
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
