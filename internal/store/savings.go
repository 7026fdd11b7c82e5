package store

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/breaker"
)

// SavingsKey is the sorted set of the breakers that saved anything:
// member a breaker's name, score the last time its savings were written
// (ms since the epoch). It lets a fleet-wide savings read find its
// breakers without a SCAN of the keyspace; members older than
// HourRetention are pruned on every write, and the set expires
// HourRetention after the last.
const SavingsKey = Prefix + "saved"

// The savings buckets (docs/operations.md, "What the breakers saved").
// Every count goes into two buckets of its breaker, the minute's and the
// hour's; a read takes minutes for a window up to MinuteRetention and
// hours beyond.
const (
	// MinuteRetention is how long a minute bucket is kept.
	MinuteRetention = 3 * time.Hour
	// HourRetention is how long an hour bucket is kept: the longest
	// window, rounded out to whole hours, and an hour more.
	HourRetention = MaxSavingsWindow + 2*time.Hour
	// MaxSavingsWindow is the longest window a savings read takes.
	MaxSavingsWindow = 7 * 24 * time.Hour
)

// The fields of a savings bucket, one per way a call was not made.
const (
	savedDenied  = "denied"
	savedLocal   = "local"
	savedRemoved = "removed"
)

// maxPending bounds the breakers whose daemon denials wait in memory for
// a flush (while Redis is away); denials of further breakers are not
// counted until a flush succeeds.
const maxPending = 100_000

// Savings are calls to a breaker's dependency that were not made.
type Savings struct {
	// DaemonDenials are Allow calls a daemon denied.
	DaemonDenials int64
	// ClientDenials are calls refused in a client's own process (fast
	// mode, the open cache), as the clients reported them.
	ClientDenials int64
	// ToolsRemoved are runs that went without the breaker's tool, from
	// their start or from a denial on (one per run and tool), as the
	// clients reported them.
	ToolsRemoved int64
}

// Calls is the number of calls not made: the sum of the counts.
func (c Savings) Calls() int64 { return c.DaemonDenials + c.ClientDenials + c.ToolsRemoved }

func (c Savings) add(o Savings) Savings {
	return Savings{c.DaemonDenials + o.DaemonDenials, c.ClientDenials + o.ClientDenials, c.ToolsRemoved + o.ToolsRemoved}
}

// fields are c as a bucket's fields, leaving out the zeros.
func (c Savings) fields() map[string]int64 {
	out := map[string]int64{}
	for f, n := range map[string]int64{savedDenied: c.DaemonDenials, savedLocal: c.ClientDenials, savedRemoved: c.ToolsRemoved} {
		if n != 0 {
			out[f] = n
		}
	}
	return out
}

// tally holds the daemon's own denials until the next flush. It is safe
// for concurrent use.
type tally struct {
	mu      sync.Mutex
	pending map[string]int64
}

// SavedKeys returns breaker's savings bucket keys, in its hash tag:
// brk:{<name>}:saved:m:<minutes since the epoch> for the minute bucket
// holding at, and brk:{<name>}:saved:h:<hours since the epoch> for the
// hour's.
func SavedKeys(breaker string, at time.Time) (minute, hour string) {
	tag := savedTag(breaker)
	return tag + "m:" + strconv.FormatInt(at.Unix()/60, 10), tag + "h:" + strconv.FormatInt(at.Unix()/3600, 10)
}

// savedTag is the start of breaker's savings keys: its keys' tag and
// "saved:".
func savedTag(breaker string) string {
	st := KeysOf(breaker).State
	return st[:len(st)-len("state")] + "saved:"
}

// savingsKey is the index key in use (Options.SavingsKey).
func (s *Store) savingsKey() string {
	if s.o.SavingsKey != "" {
		return s.o.SavingsKey
	}
	return SavingsKey
}

// CountDenial counts one Allow that breaker denied, held in memory until
// the next FlushSavings. It reads no Redis.
func (s *Store) CountDenial(breaker string) {
	s.tally.mu.Lock()
	defer s.tally.mu.Unlock()
	if s.tally.pending == nil {
		s.tally.pending = map[string]int64{}
	}
	if _, ok := s.tally.pending[breaker]; !ok && len(s.tally.pending) >= maxPending {
		return
	}
	s.tally.pending[breaker]++
	if s.o.OnSaved != nil {
		s.o.OnSaved(breaker, Savings{DaemonDenials: 1})
	}
}

// FlushSavings writes the denials counted since the last flush (one
// pipeline). On an error the counts are kept for the next flush.
func (s *Store) FlushSavings(ctx context.Context) error {
	s.tally.mu.Lock()
	pending := s.tally.pending
	s.tally.pending = nil
	s.tally.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	err := s.flush(ctx, pending)
	if err != nil {
		s.tally.mu.Lock()
		defer s.tally.mu.Unlock()
		if s.tally.pending == nil {
			s.tally.pending = map[string]int64{}
		}
		for b, n := range pending {
			s.tally.pending[b] += n
		}
	}
	return err
}

// flush writes pending denials, of the breakers that hold state (a
// denial answered from a daemon's memory while Redis was away may name
// one that holds none in Redis).
func (s *Store) flush(ctx context.Context, pending map[string]int64) error {
	names := make([]string, 0, len(pending))
	for b := range pending {
		names = append(names, b)
	}
	held, err := s.holdState(ctx, names)
	if err != nil {
		return err
	}
	counts := make(map[string]Savings, len(pending))
	for i, b := range names {
		if held[i] {
			counts[b] = Savings{DaemonDenials: pending[b]}
		}
	}
	return s.addSavings(ctx, counts)
}

// RunSavings flushes the daemon's denials every interval until ctx ends,
// then once more under a short deadline of its own. Flush errors (Redis
// away) are passed to onErr, when set, and retried on the next tick.
func (s *Store) RunSavings(ctx context.Context, interval time.Duration, onErr func(error)) {
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
			report(s.FlushSavings(fctx))
			return
		case <-t.C:
			report(s.FlushSavings(ctx))
		}
	}
}

// ReportSavings adds what clients reported, breaker by breaker, counting
// only the breakers that hold state (a client denies only a breaker the
// fleet opened): one round trip asks, one more writes. It returns how
// many breakers' reports were counted; the rest were ignored.
func (s *Store) ReportSavings(ctx context.Context, reports map[string]Savings) (counted int, err error) {
	names := make([]string, 0, len(reports))
	for b := range reports {
		names = append(names, b)
	}
	held, err := s.holdState(ctx, names)
	if err != nil {
		return 0, err
	}
	counts := map[string]Savings{}
	for i, b := range names {
		if held[i] {
			counts[b] = reports[b]
		}
	}
	if err := s.addSavings(ctx, counts); err != nil {
		return 0, err
	}
	if s.o.OnSaved != nil {
		for b, c := range counts {
			s.o.OnSaved(b, c)
		}
	}
	return len(counts), nil
}

// holdState reports for each name whether its breaker holds state (one
// pipeline of EXISTS).
func (s *Store) holdState(ctx context.Context, names []string) ([]bool, error) {
	if len(names) == 0 {
		return nil, nil
	}
	p := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(names))
	for i, b := range names {
		cmds[i] = p.Exists(ctx, KeysOf(b).State)
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, fmt.Errorf("store: savings: exists: %w", err)
	}
	out := make([]bool, len(names))
	for i, c := range cmds {
		out[i] = c.Val() == 1
	}
	return out, nil
}

// addSavings adds counts to each breaker's minute and hour buckets (now,
// on this daemon's clock: a bucket is bookkeeping, it decides nothing, as
// a rate limiter's window key is) and re-scores the breakers in the
// index, in one pipeline. Every bucket gets its retention as its TTL.
func (s *Store) addSavings(ctx context.Context, counts map[string]Savings) error {
	if len(counts) == 0 {
		return nil
	}
	now := s.Now()
	p := s.rdb.Pipeline()
	idx := s.savingsKey()
	for b, c := range counts {
		minute, hour := SavedKeys(b, now)
		for f, n := range c.fields() {
			p.HIncrBy(ctx, minute, f, n)
			p.HIncrBy(ctx, hour, f, n)
		}
		p.Expire(ctx, minute, MinuteRetention)
		p.Expire(ctx, hour, HourRetention)
		p.ZAdd(ctx, idx, redis.Z{Score: float64(now.UnixMilli()), Member: b})
	}
	p.ZRemRangeByScore(ctx, idx, "-inf", "("+strconv.FormatInt(now.Add(-HourRetention).UnixMilli(), 10))
	p.Expire(ctx, idx, HourRetention) // as long as its newest member counts
	if _, err := p.Exec(ctx); err != nil {
		return fmt.Errorf("store: write savings: %w", err)
	}
	return nil
}

// SavingsWindow is the span a savings read covers, ms since the epoch:
// From inclusive, To exclusive, both on bucket bounds.
type SavingsWindow struct{ From, To int64 }

// ReadSavings returns what breakers saved over the window before now:
// of the breakers named, or, with none named, of every breaker in the
// index written in the window. This daemon's own pending denials are
// flushed first. A window up to MinuteRetention is read by the minute
// (now's minute included), a longer one by the hour (rounded out to whole
// hours); at most MaxSavingsWindow.
func (s *Store) ReadSavings(ctx context.Context, window time.Duration, breakers []string) (map[string]Savings, SavingsWindow, error) {
	if err := s.FlushSavings(ctx); err != nil {
		return nil, SavingsWindow{}, err
	}
	now := s.Now()
	unit := time.Minute
	if window > MinuteRetention {
		unit = time.Hour
	}
	last := now.Truncate(unit)
	first := now.Add(-window).Truncate(unit)
	win := SavingsWindow{From: first.UnixMilli(), To: last.Add(unit).UnixMilli()}
	if len(breakers) == 0 {
		names, err := s.rdb.ZRangeByScore(ctx, s.savingsKey(), &redis.ZRangeBy{Min: strconv.FormatInt(win.From, 10), Max: "+inf"}).Result()
		if err != nil {
			return nil, win, fmt.Errorf("store: read savings index: %w", err)
		}
		breakers = names
	}
	out, err := s.readBuckets(ctx, breakers, first, last, unit)
	return out, win, err
}

// SavingsBetween returns what breaker saved from from to to (both
// included, by the minute; by the hour when the span is longer than
// MinuteRetention allows), after flushing this daemon's pending denials.
// A close's hook reads what the breaker saved while it was open with it.
func (s *Store) SavingsBetween(ctx context.Context, breaker string, from, to time.Time) (Savings, error) {
	if err := s.FlushSavings(ctx); err != nil {
		return Savings{}, err
	}
	unit := time.Minute
	if s.Now().Sub(from) > MinuteRetention {
		unit = time.Hour
	}
	out, err := s.readBuckets(ctx, []string{breaker}, from.Truncate(unit), to.Truncate(unit), unit)
	return out[breaker], err
}

// readBuckets sums each breaker's buckets of unit from first to last
// (both included), in one pipeline, and leaves out breakers that saved
// nothing.
func (s *Store) readBuckets(ctx context.Context, breakers []string, first, last time.Time, unit time.Duration) (map[string]Savings, error) {
	p := s.rdb.Pipeline()
	cmds := map[string][]*redis.SliceCmd{}
	for _, b := range breakers {
		for t := first; !t.After(last); t = t.Add(unit) {
			minute, hour := SavedKeys(b, t)
			key := minute
			if unit == time.Hour {
				key = hour
			}
			cmds[b] = append(cmds[b], p.HMGet(ctx, key, savedDenied, savedLocal, savedRemoved))
		}
	}
	if len(cmds) == 0 {
		return map[string]Savings{}, nil
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, fmt.Errorf("store: read savings: %w", err)
	}
	out := map[string]Savings{}
	for b, cs := range cmds {
		var sum Savings
		for _, c := range cs {
			v, err := savingsOf(c.Val())
			if err != nil {
				return nil, fmt.Errorf("store: read savings of %q: %w", b, err)
			}
			sum = sum.add(v)
		}
		if sum.Calls() != 0 {
			out[b] = sum
		}
	}
	return out, nil
}

// savingsOf decodes one bucket's HMGET reply (denied, local, removed; nil
// for a field or bucket that holds none).
func savingsOf(vals []any) (Savings, error) {
	var n [3]int64
	for i, v := range vals {
		if v == nil || i >= len(n) {
			continue
		}
		str, ok := v.(string)
		if !ok {
			return Savings{}, fmt.Errorf("%w: savings field %T", errBadReply, v)
		}
		x, err := strconv.ParseInt(str, 10, 64)
		if err != nil {
			return Savings{}, fmt.Errorf("%w: savings field %q", errBadReply, str)
		}
		n[i] = x
	}
	return Savings{DaemonDenials: n[0], ClientDenials: n[1], ToolsRemoved: n[2]}, nil
}

// spellPage is how many events SpellStart reads per round trip.
const spellPage = 200

// SpellStart returns when the denying spell that the event id of
// breaker's stream ends began: the time (at_ms) of the latest earlier
// event that took the breaker from a state that lets calls through
// (closed, forced_closed) to one that refuses them (breaker.Denying). ok
// is false when the stream no longer holds that event (trimmed by its
// length cap, or expired). It reads the stream back from id, a page a
// round trip.
func (s *Store) SpellStart(ctx context.Context, name, id string) (atMs int64, ok bool, err error) {
	key := KeysOf(name).Events
	end := "(" + id
	for {
		page, err := s.rdb.XRevRangeN(ctx, key, end, "-", spellPage).Result()
		if err != nil {
			return 0, false, fmt.Errorf("store: read the events of %q: %w", name, err)
		}
		for _, m := range page {
			from, _ := m.Values["from"].(string)
			to, _ := m.Values["to"].(string)
			if breaker.Denying(from) || !breaker.Denying(to) {
				continue
			}
			v, _ := m.Values["at_ms"].(string)
			at, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, false, fmt.Errorf("%w: entry %s field at_ms is %q, want an integer", errBadReply, m.ID, v)
			}
			return at, true, nil
		}
		if len(page) < spellPage {
			return 0, false, nil
		}
		end = "(" + page[len(page)-1].ID
	}
}
