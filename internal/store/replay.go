package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Replay is what one breaker's event log holds after a position.
type Replay struct {
	// Events are the entries after the position, oldest first.
	Events []*pb.Event
	// Lost says the log may no longer hold every entry after the
	// position: it was trimmed to EventsMaxLen past it, or expired
	// (EventRetention) since. The reader must resync from the state.
	Lost bool
}

// EventsAfter reads each named breaker's event log after a position (a
// stream id, "<ms>-<seq>", exclusive) and says whether the log still
// holds everything after it. A log is trimmed from its oldest entry and
// keeps at least EventsMaxLen entries (XADD MAXLEN ~), so it lost entries
// after the position only if its oldest entry is newer and it is full;
// an empty log lost them if the position is older than EventRetention
// (the log expired with them). One pipelined round trip of XRANGE,
// XRANGE COUNT 1 and XLEN per breaker (grouped by slot on a Cluster);
// never writes. Errors are Redis failures, malformed entries, or a
// position that is not a stream id.
func (s *Store) EventsAfter(ctx context.Context, after map[string]string) (map[string]Replay, error) {
	for b, id := range after {
		if !IsStreamID(id) {
			return nil, fmt.Errorf("store: events after %q: %q is not a stream id", b, id)
		}
	}
	type cmds struct {
		after, oldest *redis.XMessageSliceCmd
		n             *redis.IntCmd
	}
	var timeCmd *redis.TimeCmd
	per := make(map[string]cmds, len(after))
	limit := 2 * s.o.EventsMaxLen // MAXLEN ~ may keep somewhat more
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if s.o.Now == nil {
			timeCmd = p.Time(ctx)
		}
		for b, id := range after {
			k := KeysOf(b).Events
			per[b] = cmds{after: p.XRangeN(ctx, k, "("+id, "+", limit), oldest: p.XRangeN(ctx, k, "-", "+", 1), n: p.XLen(ctx, k)}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: events after: %w", err)
	}
	now := timeNow(s.o.Now, timeCmd)
	out := make(map[string]Replay, len(after))
	for b, c := range per {
		var r Replay
		for _, m := range c.after.Val() {
			e, err := EventFromStream(m)
			if err != nil {
				return nil, fmt.Errorf("store: events of %q: %w", b, err)
			}
			r.Events = append(r.Events, e)
		}
		oldest := c.oldest.Val()
		switch {
		case len(oldest) > 0:
			r.Lost = CompareIDs(oldest[0].ID, after[b]) > 0 && c.n.Val() >= s.o.EventsMaxLen
		default:
			r.Lost = streamMs(after[b]) < now.Add(-s.o.EventRetention).UnixMilli()
		}
		out[b] = r
	}
	return out, nil
}

// timeNow is the store's clock: Options.Now when pinned, else the TIME
// read in the same pipeline.
func timeNow(pinned func() time.Time, c *redis.TimeCmd) time.Time {
	if pinned != nil {
		return pinned()
	}
	return c.Val()
}

// IsStreamID reports whether id is a Redis stream id, "<ms>-<seq>".
func IsStreamID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok {
		return false
	}
	_, err1 := strconv.ParseUint(ms, 10, 64)
	_, err2 := strconv.ParseUint(seq, 10, 64)
	return err1 == nil && err2 == nil
}

// streamMs is the time part of a stream id, in ms since the epoch.
func streamMs(id string) int64 {
	ms, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return n
}
