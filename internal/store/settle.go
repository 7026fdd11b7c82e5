package store

import (
	"context"
	"log/slog"

	"github.com/breakerd/breakerd/internal/replylost"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// A decision script's reply lost after Redis may have run it is settled
// by internal/replylost; the store tells it which errors say a reply came
// (errBadReply) and runs the settling Allow (settleAllow).

// log is Options.Log, or a logger that discards.
func (s *Store) log() *slog.Logger {
	if s.o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.o.Log
}

// indeterminate is replylost.Indeterminate with the store's malformed
// reply: one came back.
func indeterminate(err error) bool { return replylost.Indeterminate(err, errBadReply) }

// lostRecord logs a Record whose reply never came back (replylost).
func (s *Store) lostRecord(name, worker string, err error) {
	s.settler.Record(name, worker, err, errBadReply)
}

// lostAllow settles an Allow whose reply never came back (err), in the
// background (replylost.Settler.Allow): its script, sent again with the
// same arguments (the same token), answers PROBE when the first took the
// lease, which is then released. keys and args are the Allow's own.
func (s *Store) lostAllow(name, worker string, keys []string, args []any, err error) {
	if !indeterminate(err) {
		return
	}
	s.settler.Allow(name, worker, err, func(ctx context.Context) (bool, error) {
		return s.settleAllow(ctx, name, worker, keys, args)
	})
}

// settleAllow sends the Allow (keys, args) again and, if it holds the
// probe lease (its answer is a PROBE, enforced or shadow), releases the
// lease with a CANCELED outcome on its ticket.
func (s *Store) settleAllow(ctx context.Context, name, worker string, keys []string, args []any) (released bool, err error) {
	out, err := run(ctx, s.rdb, allowScript, keys, args...)
	if err != nil {
		return false, err
	}
	r := reply{v: out}
	code, token, v, shadow := r.int(0), r.str(2), r.view(3), r.int(4)
	if err := r.errOr(); err != nil {
		return false, err
	}
	probing := pb.Decision_DECISION_PROBE
	if pb.Decision(code) != probing && pb.Decision(shadow) != probing {
		return false, nil
	}
	req := &pb.RecordRequest{Breaker: name, WorkerId: worker, Outcome: pb.Outcome_OUTCOME_CANCELED,
		Ticket: &pb.Ticket{Generation: v.Gen, LeaseToken: token}}
	in, err := NewRecordInput(req, s.policies.Load(), s.Now())
	if err != nil {
		return false, err
	}
	if _, err := s.record(ctx, in, nil); err != nil {
		return false, err
	}
	return true, nil
}
