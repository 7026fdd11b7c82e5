package store

import (
	"context"
	"fmt"
	"time"

	"github.com/breakerd/breakerd/internal/breaker"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// CheckLease is check_lease.lua's answer: whether this daemon runs the
// breaker's recovery check now.
type CheckLease struct {
	// Granted: run one check now; no other daemon runs one until Until.
	Granted bool
	// Gen is the breaker's generation, to pass to Recover if the check
	// succeeds (a check never moves a breaker that changed meanwhile).
	Gen int64
	// State is the breaker's public state (closed, open, half_open,
	// paused, forced_open, forced_closed). Only "open" is ever granted.
	State string
	// Holder is the daemon holding the lease ("" for none), and Until
	// (ms since the epoch, the scripts' clock) when its grant ends.
	Holder string
	Until  int64
}

// TakeCheckLease runs check_lease.lua for daemon on breaker: one round
// trip. It grants one recovery check when the breaker is automatically
// open and no grant is live, for interval (at least 1ms). The daemon that
// held the lease last has the first claim for half an interval after its
// grant ends, so one daemon keeps checking while it lives. Errors are
// Redis failures or a malformed reply.
func (s *Store) TakeCheckLease(ctx context.Context, name, daemon string, interval time.Duration) (CheckLease, error) {
	if interval < time.Millisecond {
		return CheckLease{}, fmt.Errorf("store: check lease %q: interval %s below 1ms", name, interval)
	}
	k := KeysOf(name)
	args := append(s.common(name, daemon, s.Policy(name), 1), interval.Milliseconds())
	res, err := run(ctx, s.rdb, checkLeaseScript, append(k.list(), k.Check), args...)
	if err != nil {
		return CheckLease{}, fmt.Errorf("store: check lease %q: %w", name, err)
	}
	r := reply{v: res}
	l := CheckLease{Granted: r.int(0) == 1, Gen: r.int(1), State: r.str(2), Holder: r.str(3), Until: r.int(4)}
	if err := r.errOr(); err != nil {
		return CheckLease{}, fmt.Errorf("store: check lease %q: %w", name, err)
	}
	return l, nil
}

// TakeTargetLease runs target_lease.lua: it grants daemon one recovery
// check of target (a check's URL or gRPC target) for interval (at least
// 1ms), fleet-wide: however many open breakers share the target, it is
// checked at most once an interval, judged by the scripts' clock. One
// round trip. Errors are Redis failures or a malformed reply.
func (s *Store) TakeTargetLease(ctx context.Context, target string, interval time.Duration) (bool, error) {
	if interval < time.Millisecond {
		return false, fmt.Errorf("store: target lease: interval %s below 1ms", interval)
	}
	var pinned int64
	if s.o.Now != nil {
		pinned = s.o.Now().UnixMilli()
	}
	res, err := run(ctx, s.rdb, targetLeaseScript, []string{TargetKey(target)}, pinned, interval.Milliseconds())
	if err != nil {
		return false, fmt.Errorf("store: target lease: %w", err)
	}
	r := reply{v: res}
	granted := r.int(0) == 1
	if err := r.errOr(); err != nil {
		return false, fmt.Errorf("store: target lease: %w", err)
	}
	return granted, nil
}

// Recover runs recover.lua: daemon's recovery check of breaker, started
// when the breaker was open at generation gen, succeeded. An automatic
// open breaker still at gen goes half-open at once (its next Allow is the
// probe; level and cooldown are kept) and the transition is an event;
// anything else is left as it is. moved says which; state is the
// breaker's state after the call. A failed check must not call Recover.
func (s *Store) Recover(ctx context.Context, name, daemon string, gen int64) (moved bool, state *pb.BreakerState, err error) {
	set := s.policies.Load()
	p, g := set.For(name), groupOf(set, name)
	args := append(s.common(name, daemon, p, 2), gen, boolArg(p.Shadow))
	// (open to half-open: the breaker stays open in its group's index,
	// so a Cluster needs no index write; a single Redis's save() re-scores it)
	res, err := run(ctx, s.rdb, recoverScript, s.scriptKeys(name, g), args...)
	if err != nil {
		return false, nil, fmt.Errorf("store: recover %q: %w", name, err)
	}
	r := reply{v: res}
	moved = r.int(0) == 1
	v := r.view(1)
	if err := r.errOr(); err != nil {
		return false, nil, fmt.Errorf("store: recover %q: %w", name, err)
	}
	st := stateOf(v, name, p)
	withGroup(st, g)
	return moved, st, nil
}

// RecoverCall is the machine's call for a successful recovery check by
// daemon of a breaker it saw open at generation gen (the differential
// test and in-memory tables).
func RecoverCall(daemon string, gen int64) breaker.Call {
	return breaker.Call{Op: breaker.OpRecover, Actor: daemon, Ticket: breaker.Ticket{Gen: gen}}
}
