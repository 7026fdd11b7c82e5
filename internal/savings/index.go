package savings

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxPending bounds the breakers whose daemon denials wait in memory for
// a flush (while Redis is away); denials of further breakers are not
// counted until a flush succeeds.
const maxPending = 100_000

// Options configure an Index.
type Options struct {
	// Client is the Redis (or Redis Cluster) the buckets live in.
	Client redis.Cmdable
	// IndexKey is the sorted set of the breakers that saved anything:
	// member a breaker's name, score the last time its savings were
	// written (ms since the epoch). It lets a fleet-wide read find its
	// breakers without a SCAN of the keyspace; members older than
	// HourRetention are pruned on every write, and the set expires
	// HourRetention after the last.
	IndexKey string
	// StateKey returns a breaker's state key: a breaker holds state when
	// it exists, and its buckets share its hash tag (BucketKeys).
	StateKey func(breaker string) string
	// Now is the daemon's clock: a bucket is bookkeeping, it decides
	// nothing, as a rate limiter's window key is.
	Now func() time.Time
	// OnSaved, when set, is called with each count of calls not made as
	// the Index takes it (a denial as CountDenial holds it, a client's
	// report once written): the daemon's metrics. It must not block.
	OnSaved func(breaker string, c Counts)
}

// Index counts and reads what the breakers saved. It is safe for
// concurrent use.
type Index struct {
	o Options
	// mu guards pending: this daemon's Allow denials until Flush.
	mu      sync.Mutex
	pending map[string]int64
	// flushing is held through a Flush, from taking pending to its write
	// (a semaphore, so that a wait for it ends with the caller's context):
	// a read's flush waits for one in flight (Run's), so that the read
	// finds every denial counted before it began.
	flushing chan struct{}
}

// New returns an Index over o.
func New(o Options) *Index { return &Index{o: o, flushing: make(chan struct{}, 1)} }

// CountDenial counts one Allow that breaker denied, held in memory until
// the next Flush. It reads no Redis.
func (x *Index) CountDenial(breaker string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.pending == nil {
		x.pending = map[string]int64{}
	}
	if _, ok := x.pending[breaker]; !ok && len(x.pending) >= maxPending {
		return
	}
	x.pending[breaker]++
	if x.o.OnSaved != nil {
		x.o.OnSaved(breaker, Counts{DaemonDenials: 1})
	}
}

// Flush writes the denials counted since the last flush (one pipeline),
// of the breakers that hold state (a denial answered from a daemon's
// memory while Redis was away may name one that holds none in Redis). On
// an error the counts are kept for the next flush. Flushes run one at a
// time: one waits for another in flight to end, or for ctx.
func (x *Index) Flush(ctx context.Context) error {
	select {
	case x.flushing <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("savings: wait for a flush in flight: %w", context.Cause(ctx))
	}
	defer func() { <-x.flushing }()
	x.mu.Lock()
	pending := x.pending
	x.pending = nil
	x.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	counts := make(map[string]Counts, len(pending))
	for b, n := range pending {
		counts[b] = Counts{DaemonDenials: n}
	}
	_, err := x.write(ctx, counts)
	if err != nil {
		x.mu.Lock()
		defer x.mu.Unlock()
		if x.pending == nil {
			x.pending = map[string]int64{}
		}
		for b, n := range pending {
			x.pending[b] += n
		}
	}
	return err
}

// Run flushes the daemon's denials every interval until ctx ends, then
// once more under a short deadline of its own. Flush errors (Redis away)
// are passed to onErr, when set, and retried on the next tick.
func (x *Index) Run(ctx context.Context, interval time.Duration, onErr func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	report := func(err error) {
		if err != nil && onErr != nil {
			onErr(err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			report(x.Flush(fctx))
			return
		case <-t.C:
			report(x.Flush(ctx))
		}
	}
}

// Report adds what clients reported, breaker by breaker, counting only
// the breakers that hold state (a client denies only a breaker the fleet
// opened): one round trip asks, one more writes. It returns how many
// breakers' reports were counted; the rest were ignored.
func (x *Index) Report(ctx context.Context, reports map[string]Counts) (counted int, err error) {
	written, err := x.write(ctx, reports)
	if err != nil {
		return 0, err
	}
	if x.o.OnSaved != nil {
		for b, c := range written {
			x.o.OnSaved(b, c)
		}
	}
	return len(written), nil
}

// write adds counts of the breakers that hold state and returns those.
func (x *Index) write(ctx context.Context, counts map[string]Counts) (map[string]Counts, error) {
	names := make([]string, 0, len(counts))
	for b := range counts {
		names = append(names, b)
	}
	held, err := x.holdState(ctx, names)
	if err != nil {
		return nil, err
	}
	written := map[string]Counts{}
	for i, b := range names {
		if held[i] {
			written[b] = counts[b]
		}
	}
	return written, x.add(ctx, written)
}

// holdState reports for each name whether its breaker holds state (one
// pipeline of EXISTS).
func (x *Index) holdState(ctx context.Context, names []string) ([]bool, error) {
	if len(names) == 0 {
		return nil, nil
	}
	p := x.o.Client.Pipeline()
	cmds := make([]*redis.IntCmd, len(names))
	for i, b := range names {
		cmds[i] = p.Exists(ctx, x.o.StateKey(b))
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, fmt.Errorf("savings: exists: %w", err)
	}
	out := make([]bool, len(names))
	for i, c := range cmds {
		out[i] = c.Val() == 1
	}
	return out, nil
}

// add adds counts to each breaker's minute and hour buckets (now) and
// re-scores the breakers in the index, in one pipeline. Every bucket gets
// its retention as its TTL.
func (x *Index) add(ctx context.Context, counts map[string]Counts) error {
	if len(counts) == 0 {
		return nil
	}
	now := x.o.Now()
	p := x.o.Client.Pipeline()
	for b, c := range counts {
		minute, hour := BucketKeys(x.o.StateKey(b), now)
		for f, n := range c.fields() {
			p.HIncrBy(ctx, minute, f, n)
			p.HIncrBy(ctx, hour, f, n)
		}
		p.Expire(ctx, minute, MinuteRetention)
		p.Expire(ctx, hour, HourRetention)
		p.ZAdd(ctx, x.o.IndexKey, redis.Z{Score: float64(now.UnixMilli()), Member: b})
	}
	p.ZRemRangeByScore(ctx, x.o.IndexKey, "-inf", "("+strconv.FormatInt(now.Add(-HourRetention).UnixMilli(), 10))
	p.Expire(ctx, x.o.IndexKey, HourRetention) // as long as its newest member counts
	if _, err := p.Exec(ctx); err != nil {
		return fmt.Errorf("savings: write: %w", err)
	}
	return nil
}
