package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/breaker"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// DefaultEventsLimit is the number of events Events returns when the query
// sets no limit; MaxEventsLimit is the most it returns.
const (
	DefaultEventsLimit = 1000
	MaxEventsLimit     = 10000
)

// EventQuery selects events from the durable log.
type EventQuery struct {
	// Breaker keeps only this breaker's events; empty reads every breaker.
	Breaker string
	// Since keeps only events at most this old on the store's clock (Redis
	// TIME, or Options.Now when pinned). 0 keeps everything the log holds.
	Since time.Duration
	// Limit keeps the most recent Limit events. 0 means
	// DefaultEventsLimit; values above MaxEventsLimit are capped to it.
	Limit int
}

// Events reads the durable event log (each breaker's stream
// KeysOf(name).Events), returning the most recent q.Limit events no older
// than q.Since, oldest first (by at_ms, then stream id). Across breakers
// it SCANs for event streams (every master, on a Cluster) and merges them,
// so it is for operators, not hot paths. The reads are one pipelined round
// trip after the scan. It never writes. Errors are Redis failures or
// malformed entries.
func (s *Store) Events(ctx context.Context, q EventQuery) ([]*pb.Event, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultEventsLimit
	}
	limit = min(limit, MaxEventsLimit)
	names := []string{q.Breaker}
	if q.Breaker == "" {
		var err error
		if names, err = s.scanNames(ctx, eventsKeyPattern, "events"); err != nil {
			return nil, err
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	// Each stream's newest `limit` entries are enough: the merged result
	// keeps `limit` in all. The clock is read in the same round trip.
	var timeCmd *redis.TimeCmd
	cmds := make([]*redis.XMessageSliceCmd, len(names))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if s.o.Now == nil && q.Since > 0 {
			timeCmd = p.Time(ctx)
		}
		for i, n := range names {
			cmds[i] = p.XRevRangeN(ctx, KeysOf(n).Events, "+", "-", int64(limit))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: read events: %w", err)
	}
	var cutoff int64
	if q.Since > 0 {
		now := time.Time{}
		if timeCmd != nil {
			now = timeCmd.Val()
		} else {
			now = s.o.Now()
		}
		cutoff = now.Add(-q.Since).UnixMilli()
	}
	var out []*pb.Event
	for i, c := range cmds {
		for _, m := range c.Val() {
			e, err := EventFromStream(m)
			if err != nil {
				return nil, fmt.Errorf("store: read events of %q: %w", names[i], err)
			}
			if e.AtMs >= cutoff {
				out = append(out, e)
			}
		}
	}
	slices.SortFunc(out, func(a, b *pb.Event) int {
		if c := cmp.Compare(a.AtMs, b.AtMs); c != 0 {
			return c
		}
		return CompareIDs(a.Id, b.Id)
	})
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, nil
}

// EventFromStream parses one entry of a breaker's event stream as lib.lua's
// emit() appends it (XADD fields breaker, kind, from, to, gen, cause,
// failures, workers, rl, cooldown_ms, at_ms, actor, last, note, shadow
// "1" on the events of a shadowed breaker, and trace on a transition into
// open a traced Record caused) and renders
// its reason (breaker.EventReason). A kind this daemon does not know
// (written by a newer one) reads as EVENT_KIND_UNSPECIFIED rather than
// failing the whole read; a malformed number is an error naming the field.
func EventFromStream(m redis.XMessage) (*pb.Event, error) {
	str := func(f string) string { v, _ := m.Values[f].(string); return v }
	e := breaker.Event{Kind: str("kind"), From: str("from"), To: str("to"), Cause: breaker.Cause(str("cause")),
		Actor: str("actor"), Last: str("last"), Note: str("note"), Shadow: str("shadow") == "1", Trace: str("trace")}
	for f, p := range map[string]*int64{"gen": &e.Gen, "failures": &e.Fails, "workers": &e.Workers,
		"rl": &e.RL, "cooldown_ms": &e.Cooldown, "at_ms": &e.At} {
		v := str(f)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: entry %s field %s is %q, want an integer", errBadReply, m.ID, f, v)
		}
		*p = n
	}
	name := str("breaker")
	reason := breaker.EventReason(name, e)
	if e.Cause == "" { // an entry from before events carried causes
		reason = str("reason")
	}
	return &pb.Event{Id: m.ID, Breaker: name, Kind: kinds[e.Kind], From: breaker.StateOf(e.From),
		To: breaker.StateOf(e.To), Reason: reason, Actor: e.Actor, Generation: e.Gen,
		Failures: e.Fails, DistinctWorkers: e.Workers, CooldownMs: e.Cooldown, AtMs: e.At,
		Shadow: e.Shadow, Cause: string(e.Cause), TraceId: e.Trace}, nil
}

// CompareIDs orders Redis stream ids ("<ms>-<seq>") numerically: -1, 0
// or +1 as cmp.Compare. A malformed part reads as 0.
func CompareIDs(a, b string) int {
	parse := func(id string) (int64, int64) {
		ms, seq, _ := strings.Cut(id, "-")
		x, _ := strconv.ParseInt(ms, 10, 64)
		y, _ := strconv.ParseInt(seq, 10, 64)
		return x, y
	}
	am, as := parse(a)
	bm, bs := parse(b)
	if c := cmp.Compare(am, bm); c != 0 {
		return c
	}
	return cmp.Compare(as, bs)
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
