package savings

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Read returns what breakers saved over the window before now: of the
// breakers named, or, with none named, of every breaker in the index
// written in the window. This daemon's own pending denials are flushed
// first. A window up to MinuteRetention is read by the minute (now's
// minute included), a longer one by the hour (rounded out to whole
// hours); at most MaxWindow.
func (x *Index) Read(ctx context.Context, window time.Duration, breakers []string) (map[string]Counts, Window, error) {
	if err := x.Flush(ctx); err != nil {
		return nil, Window{}, err
	}
	now := x.o.Now()
	unit := time.Minute
	if window > MinuteRetention {
		unit = time.Hour
	}
	last := now.Truncate(unit)
	first := now.Add(-window).Truncate(unit)
	win := Window{From: first.UnixMilli(), To: last.Add(unit).UnixMilli()}
	if len(breakers) == 0 {
		names, err := x.o.Client.ZRangeByScore(ctx, x.o.IndexKey, &redis.ZRangeBy{Min: strconv.FormatInt(win.From, 10), Max: "+inf"}).Result()
		if err != nil {
			return nil, win, fmt.Errorf("savings: read the index: %w", err)
		}
		breakers = names
	}
	out, err := x.buckets(ctx, breakers, first, last, unit)
	return out, win, err
}

// Between returns what breaker saved from from to to (both included, by
// the minute; by the hour when the span is longer than MinuteRetention
// allows), after flushing this daemon's pending denials. A close's hook
// reads what the breaker saved while it was open with it.
func (x *Index) Between(ctx context.Context, breaker string, from, to time.Time) (Counts, error) {
	if err := x.Flush(ctx); err != nil {
		return Counts{}, err
	}
	unit := time.Minute
	if x.o.Now().Sub(from) > MinuteRetention {
		unit = time.Hour
	}
	out, err := x.buckets(ctx, []string{breaker}, from.Truncate(unit), to.Truncate(unit), unit)
	return out[breaker], err
}

// buckets sums each breaker's buckets of unit from first to last (both
// included), in one pipeline, and leaves out breakers that saved nothing.
func (x *Index) buckets(ctx context.Context, breakers []string, first, last time.Time, unit time.Duration) (map[string]Counts, error) {
	p := x.o.Client.Pipeline()
	cmds := map[string][]*redis.SliceCmd{}
	for _, b := range breakers {
		for t := first; !t.After(last); t = t.Add(unit) {
			minute, hour := BucketKeys(x.o.StateKey(b), t)
			key := minute
			if unit == time.Hour {
				key = hour
			}
			cmds[b] = append(cmds[b], p.HMGet(ctx, key, fieldDenied, fieldLocal, fieldRemoved))
		}
	}
	if len(cmds) == 0 {
		return map[string]Counts{}, nil
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, fmt.Errorf("savings: read: %w", err)
	}
	out := map[string]Counts{}
	for b, cs := range cmds {
		var sum Counts
		for _, c := range cs {
			v, err := countsOf(c.Val())
			if err != nil {
				return nil, fmt.Errorf("savings: read %q: %w", b, err)
			}
			sum = sum.add(v)
		}
		if sum.Calls() != 0 {
			out[b] = sum
		}
	}
	return out, nil
}
