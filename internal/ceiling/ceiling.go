// Package ceiling keeps the count of live breakers that --max-breakers
// bounds: it admits or refuses a call that would create state for a new
// breaker, and registers the breakers that hold state. It owns the live
// set's scores; the atomic count-and-reserve is a script the store runs
// for it (Options.Reserve), so the package never imports the store.
package ceiling

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/policy"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// maxRemembered bounds the names a daemon remembers as registered in the
// live set; past it the memory starts afresh (names are registered again,
// once each).
const maxRemembered = 100_000

// ReserveFor is how long an admitted breaker's place is held before the
// call that creates its state re-scores it: well past any call's timeout.
const ReserveFor = time.Minute

// Error is the error a call gets when it would create state for a new
// breaker while the fleet holds state for the ceiling's number of
// breakers or more. The server answers it as ResourceExhausted.
type Error struct {
	Breaker string
	Live    int64 // live breakers counted
	Max     int64 // the ceiling (--max-breakers)
}

func (e *Error) Error() string {
	return fmt.Sprintf("breaker: %q would be a new breaker, and the fleet already holds state for %d breakers, at or past the ceiling of %d (--max-breakers); calls on breakers that hold state still work, and state expires once idle for its retention",
		e.Breaker, e.Live, e.Max)
}

// Reserve asks Redis, in one round trip, whether breaker holds state
// (held) and, atomically on the live set key, prunes the members scored
// before now, counts the rest and, below max, gives breaker a place scored
// until (the store's reserve.lua). admitted and live are the script's
// reply: whether breaker has a place, and the members counted. It must be
// safe for concurrent use.
type Reserve func(ctx context.Context, key, breaker string, now, max, until int64) (held, admitted bool, live int64, err error)

// Options configure a Ceiling. Every field is required.
type Options struct {
	// Max is the ceiling (--max-breakers); above 0.
	Max int64
	// Key is the live set: member a breaker's name, score when its state
	// is expected to expire (ms since the epoch).
	Key string
	// Client re-scores registered breakers (ZADD GT) and counts the set.
	Client redis.Cmdable
	// Reserve runs the admission's round trip.
	Reserve Reserve
	// Now is the daemon's clock, which the scores are in.
	Now func() time.Time
	// EventRetention is how long a breaker's event log outlives its last
	// event: a breaker with a log counts until then.
	EventRetention time.Duration
	// Within bounds a round trip a call waits on (the re-scoring after its
	// script), as the daemon bounds its decisions; nil leaves the call's
	// context as it is.
	Within func(context.Context) (context.Context, context.CancelFunc)
}

// Ceiling keeps the count of live breakers (--max-breakers).
//
// How it counts: before a call that could create state for a breaker this
// daemon has not registered (a Record whose outcome is not a success, a
// slow success, or any Record in window mode, which writes its window), it
// asks Redis in one round trip whether the breaker holds state (EXISTS)
// and, in reserve.lua on the live set's slot, prunes the expired members,
// counts the rest and, below Max, reserves the breaker's place (a member
// scored ReserveFor from now) in the same atomic step; at or past Max it
// refuses. After every script run whose reply shows the breaker holding
// state, the daemon re-scores it (ZADD GT) with the time its keys expire
// at the latest (twice the policy's retention from now, or its window if
// longer, or a pin's end plus the retention; a pin without an end never
// expires; a breaker with an event log, when the log does,
// Options.EventRetention from now); it repeats that only once the score it
// set is more than a retention short of that.
//
// How exact: the count and the reservation are one script on one key, so
// daemons admitting at once, on one Redis or a Cluster, never take more
// places than Max. What makes the count differ from the breakers holding
// state: an admitted call that creates no state (an error, a stale
// ticket) holds its place until the reservation ends (ReserveFor); a
// breaker whose state exists but was never registered (created while
// Redis was away, or its registration failed) is not counted until a call
// registers it; a paused breaker (its pause outlives twice the retention)
// may drop from the count before its keys expire, and a breaker whose keys
// expired early is counted until its score passes. While Redis is away
// the ceiling is not applied (the in-memory breakers are dropped when it
// answers again), and a Redis error on the admission admits the call: the
// call itself meets the same Redis.
//
// A nil *Ceiling is no ceiling: it admits every call and counts nothing.
// A Ceiling is safe for concurrent use.
type Ceiling struct {
	o Options

	mu    sync.Mutex
	known map[string]int64 // breaker -> the score this daemon set (ms)
}

// New returns a Ceiling of o.Max live breakers counted in o.Key.
func New(o Options) *Ceiling {
	return &Ceiling{o: o, known: map[string]int64{}}
}

// Admit applies the ceiling to a call that could create state for
// breaker: nil when it may go ahead (its place reserved when it needed
// one), or an *Error. A Redis error admits the call: the call itself meets
// the same Redis.
func (c *Ceiling) Admit(ctx context.Context, breaker string) error {
	if c == nil {
		return nil
	}
	now := c.o.Now().UnixMilli()
	c.mu.Lock()
	registered := c.known[breaker] > now
	c.mu.Unlock()
	if registered {
		return nil
	}
	held, admitted, live, err := c.o.Reserve(ctx, c.o.Key, breaker, now, c.o.Max, now+ReserveFor.Milliseconds())
	if err != nil || held || admitted {
		return nil // a Redis error admits; a breaker holding state is never refused
	}
	return &Error{Breaker: breaker, Live: live, Max: c.o.Max}
}

// Register adds breaker to the live set when st shows it holding state or
// an event log (logged: the call raised an alert whatever st shows) and
// the score this daemon last set is more than a retention short of the
// one it would set now (p is the breaker's policy). A breaker with an
// event log counts until the log expires (Options.EventRetention from
// now), so the ceiling bounds the event streams too: a log outlives its
// breaker's state. Errors are ignored: the count is approximate, and the
// next call registers it again.
func (c *Ceiling) Register(ctx context.Context, breaker string, p policy.Policy, st *pb.BreakerState, logged bool) {
	if c == nil || st == nil {
		return
	}
	// Every event leaves a generation, a suspect or a capped trip behind,
	// except a credential or quota alert on a breaker holding nothing.
	logged = logged || st.GetGeneration() > 0 || st.GetSuspectWorker() != "" || st.GetOpenFractionCapped()
	if !logged && st.GetFailures() == 0 && st.GetDistinctWorkers() == 0 && st.GetSlowCalls() == 0 &&
		st.GetState() == pb.State_STATE_CLOSED && !st.GetWindowMode() {
		return // holds no state (a window-mode call always writes its window)
	}
	ret := p.Retention().Milliseconds()
	score := c.score(p, st, logged)
	c.mu.Lock()
	fresh := c.known[breaker] >= score-ret
	c.mu.Unlock()
	if fresh {
		return
	}
	member := redis.Z{Score: float64(score), Member: breaker}
	if score == math.MaxInt64 {
		member.Score = math.Inf(1)
	}
	if c.o.Within != nil {
		var cancel context.CancelFunc
		ctx, cancel = c.o.Within(ctx)
		defer cancel()
	}
	if err := c.o.Client.ZAddGT(ctx, c.o.Key, member).Err(); err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.known) >= maxRemembered {
		clear(c.known)
	}
	c.known[breaker] = score
}

// score is when a breaker in state st under policy p is expected to expire
// (ms since the epoch; math.MaxInt64 for never).
func (c *Ceiling) score(p policy.Policy, st *pb.BreakerState, logged bool) int64 {
	now := c.o.Now().UnixMilli()
	ret := p.Retention().Milliseconds()
	score := now + max(2*ret, p.Window.Milliseconds())
	if logged {
		score = max(score, now+c.o.EventRetention.Milliseconds())
	}
	switch {
	case (st.GetState() == pb.State_STATE_FORCED_OPEN || st.GetState() == pb.State_STATE_FORCED_CLOSED) && st.GetForcedUntilMs() == 0:
		score = math.MaxInt64
	case st.GetForcedUntilMs() > 0:
		score = max(score, st.GetForcedUntilMs()+ret)
	}
	return score
}

// Live returns how many breakers the ceiling counts as live now (expired
// entries pruned first). Without a ceiling it is 0.
func (c *Ceiling) Live(ctx context.Context) (int64, error) {
	if c == nil {
		return 0, nil
	}
	var card *redis.IntCmd
	_, err := c.o.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRemRangeByScore(ctx, c.o.Key, "-inf", "("+strconv.FormatInt(c.o.Now().UnixMilli(), 10))
		card = p.ZCard(ctx, c.o.Key)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("ceiling: live breakers: %w", err)
	}
	return card.Val(), nil
}
