package store

import (
	"context"
	"time"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// listPiece is how many breakers a paced listing reads per round trip.
const listPiece = 32

// batchGetPaced is listed for a background listing: names are read
// listPiece at a time, each piece given to read as soon as it is in and
// followed by a pause as long as it took. Redis runs one script at a
// time, and the reads of thousands of breakers sent at once keep every
// daemon's decisions queued behind them until they are done
// (docs/performance.md#another-machine). Paced, a listing takes about
// three times as long, and a decision waits behind one piece at most. It
// stops pausing when the names left, read at the pace so far, would not
// be read before ctx's deadline.
func (s *Store) batchGetPaced(ctx context.Context, names []string, read func([]*pb.BreakerState)) ([]*pb.BreakerState, error) {
	out := make([]*pb.BreakerState, 0, len(names))
	var work time.Duration
	for done := 0; done < len(names); {
		n := min(len(names)-done, listPiece)
		began := time.Now()
		got, err := s.listed(ctx, names[done:done+n])
		if err != nil {
			return nil, err
		}
		took := time.Since(began)
		read(got)
		out, done, work = append(out, got...), done+n, work+took
		if done == len(names) || !mayPause(ctx, work, done, len(names)) {
			continue
		}
		if err := pause(ctx, took); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// mayPause reports whether a paced listing that read done of total names
// in work may go on pausing: whether the rest, read at that pace with a
// pause as long after each piece, would end before ctx's deadline.
func mayPause(ctx context.Context, work time.Duration, done, total int) bool {
	deadline, ok := ctx.Deadline()
	if !ok {
		return true
	}
	rest := time.Duration(float64(work) * float64(total-done) / float64(done))
	return 2*rest < time.Until(deadline)
}

// pause waits d, or until ctx ends (its error). The timer needs no Stop:
// since Go 1.23 an unreferenced one is collected.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
