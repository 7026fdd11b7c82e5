package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// tripWait bounds how long the propagation scenario waits for every
// poller to deny after a trip.
const tripWait = 10 * time.Second

// settle is how long a scenario waits for a condition (every poller or
// caller denied) before it fails: want, or the time left to ctx when ctx
// has a deadline (a test on a busy host gives its own).
func settle(ctx context.Context, want time.Duration) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d)
	}
	return want
}

// propagation trips o.Trips fresh breakers through daemon A, each by
// SERVER_ERROR failures from two workers (the default policy's quorum),
// while o.Pollers clients connected to daemon B poll Allow on it without
// pause. Each duration runs from the send of the Record that tripped it to
// the moment the last poller saw a denial. In strict mode a poller's first
// Allow after the trip denies, so this is about one poll RPC.
func (e *env) propagation(ctx context.Context, o Options, round int) ([]time.Duration, error) {
	pollers := make([]*client.Client, o.Pollers)
	for p := range pollers {
		conn, err := e.dial(e.daemonB)
		if err != nil {
			return nil, err
		}
		pollers[p] = client.New(conn, clientOptions(fmt.Sprintf("bench-poller-%d", p))...)
	}
	defer func() {
		for _, p := range pollers {
			_ = p.Close()
		}
	}()
	var out []time.Duration
	for k := 0; k < o.Trips; k++ {
		d, err := e.tripOnce(ctx, pollers, e.main.breaker(fmt.Sprintf("trip-%d-%d", round, k)))
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func (e *env) tripOnce(ctx context.Context, pollers []*client.Client, name string) (time.Duration, error) {
	pctx, cancel := context.WithTimeout(ctx, settle(ctx, tripWait))
	defer cancel()
	denied := make([]time.Time, len(pollers))
	errs := make([]error, len(pollers))
	var allowedOnce, wg sync.WaitGroup
	for p, cl := range pollers {
		wg.Add(1)
		allowedOnce.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for {
				perm, err := cl.Allow(pctx, name)
				if err != nil {
					errs[p] = err
					if first {
						allowedOnce.Done()
					}
					return
				}
				if !perm.Allowed() {
					denied[p] = time.Now()
					if first {
						allowedOnce.Done()
					}
					return
				}
				if first {
					first = false
					allowedOnce.Done()
				}
			}
		}()
	}
	allowedOnce.Wait()
	t0, _, err := e.tripOnA(pctx, name)
	if err != nil {
		cancel()
		wg.Wait()
		return 0, fmt.Errorf("trip %s: %w", name, err)
	}
	wg.Wait()
	var last time.Time
	for p := range pollers {
		if errs[p] != nil {
			return 0, fmt.Errorf("trip %s: poller %d: %w", name, p, errs[p])
		}
		if denied[p].IsZero() {
			return 0, errors.New("trip: a poller never denied")
		}
		if denied[p].After(last) {
			last = denied[p]
		}
	}
	return max(last.Sub(t0), 0), nil
}

// tripOnA sends SERVER_ERROR failures to daemon A from two alternating
// workers until one answer shows name open (at most 20). sent is when the
// tripping Record was sent, back when its answer came.
func (e *env) tripOnA(ctx context.Context, name string) (sent, back time.Time, err error) {
	for i := range 20 {
		sent = time.Now()
		res, err := e.main.daemonA.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: fmt.Sprintf("bench-tripper-%d", i%2),
			Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: "HTTP 503"})
		if err != nil {
			return sent, time.Time{}, err
		}
		if res.GetState().GetState() == pb.State_STATE_OPEN {
			return sent, time.Now(), nil
		}
	}
	return sent, time.Time{}, errors.New("not open after 20 failures from 2 workers")
}
