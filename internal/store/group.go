package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/policy"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The open-fraction cap's index (breaker/cap.go states the rule).
//
// Each group (a policy file's groups) has two sorted sets in its own
// Cluster slot, hash-tagged by the group's name:
// brk:grp:{<group>}:known, its members holding state (shown by Get and
// List; the cap does not read it), and brk:grp:{<group>}:open, of them the
// open ones (breaker.State.Denies: what the cap reads),
// each member scored with when the breaker's state expires (ms since the
// epoch; +inf for a pin without an end), or in the open set when it stops
// being open by itself if sooner (a pin's or a pause's end:
// breaker.State.OpenUntil). A breaker whose state expires, or whose pin
// or pause lapses, unseen
// leaves the index (or the open set) by its score: every reader drops the
// entries scored now or before first, so nothing drifts.
//
// On a single Redis (not a Cluster) every script on a breaker in a group
// also gets the group's keys (lib.lua KEYS[8], KEYS[9]): save() keeps the
// breaker's entries in the same atomic step as its state, and record.lua
// counts the open members in the same step as the trip. The cap is exact
// there.
//
// On a Cluster the group's keys are in another slot, so:
//   - before a Record that could trip (the outcome is not a success, or it
//     is a slow success, or the policy is in window mode) the daemon reads
//     the group's other open members (group.lua count) and passes them to
//     record.lua (ARGV[32]);
//   - after a Record that read them or that moved the breaker's
//     generation, and after every Force, the daemon writes the breaker's
//     entries from the reply (group.lua index).
//
// The bound on a Cluster: a trip is judged on counts read before it, so
// trips in flight at once in one group (read, judged, and indexed by
// different calls) may each see the same open count. The open breakers
// then exceed the cap by at most the number of trips in flight at once
// across the fleet in that group, less one: at most
// max(floor(max_open_fraction * members), 1) + in-flight - 1 open (order the
// trips that opened by when they read the counts: the j-th missed at most
// the in-flight-1 others still in flight, so it saw at least j-in-flight
// open, and was let through); TestOpenFractionCapConcurrent
// checks it with many breakers tripping at once from two stores. An
// Allow never writes the index: it changes no breaker's openness (a pin or
// a pause lapsing leaves the open set by its score). Also approximate
// there: a success that only extends a breaker's
// retention does not re-score it, so it may leave the known set up to a
// retention early (the shown counts only: the cap reads the open set). A
// Redis error on the group's slot lets the trip through uncapped (the
// breaker's own rule still applies) and skips the index write; the next
// Record or Force on the breaker writes it again.

// GroupKeys returns the keys of a group's index: its members holding state and
// its open ones.
func GroupKeys(group string) (known, open string) {
	tag := Prefix + "grp:{" + group + "}:"
	return tag + "known", tag + "open"
}

// onCluster reports whether the store runs on a Redis Cluster.
func (s *Store) onCluster() bool {
	_, ok := s.rdb.(*redis.ClusterClient)
	return ok
}

// scriptKeys returns the KEYS of a breaker script on name: the breaker's
// keys, and on a single Redis, for a breaker in group g (nil: none), its
// check key and then the group's index (lib.lua).
func (s *Store) scriptKeys(name string, g *policy.Group) []string {
	k := KeysOf(name)
	if g == nil || s.onCluster() {
		return k.list()
	}
	known, open := GroupKeys(g.Name)
	return append(k.list(), k.Check, known, open)
}

// recordKeys are record.lua's KEYS: scriptKeys with the breaker's recent
// Records in the seventh place (lib.lua), before the group's.
func (s *Store) recordKeys(name string, g *policy.Group) []string {
	k := KeysOf(name)
	out := append(k.list(), k.Records)
	if g == nil || s.onCluster() {
		return out
	}
	known, open := GroupKeys(g.Name)
	return append(out, known, open)
}

// groupOf returns the group of name under set, or nil.
func groupOf(set *policy.Set, name string) *policy.Group {
	if g, ok := set.GroupOf(name); ok {
		return &g
	}
	return nil
}

// runGroup runs group.lua on group g.
func (s *Store) runGroup(ctx context.Context, g string, args ...any) (known, open int64, err error) {
	kk, ko := GroupKeys(g)
	res, err := run(ctx, s.rdb, groupScript, []string{kk, ko}, args...)
	if err != nil {
		return 0, 0, err
	}
	return groupReply(res)
}

// groupReply reads group.lua's reply: the group's known and open counts.
func groupReply(res []any) (known, open int64, err error) {
	r := reply{v: res}
	known, open = r.int(0), r.int(1)
	if err := r.errOr(); err != nil {
		return 0, 0, err
	}
	return known, open, nil
}

// groupStatus queues, in a pipeline (pipelined), GroupStatus's read of
// group g; groupStatusOf reads its answer.
func (s *Store) groupStatus(eval evalFunc, g string) *redis.Cmd {
	kk, ko := GroupKeys(g)
	return eval(groupScript, []string{kk, ko}, "status", s.pinnedMs(), "")
}

func groupStatusOf(c *redis.Cmd) (known, open int64, err error) {
	res, err := c.Slice()
	if err != nil {
		return 0, 0, scriptError(groupScript, err)
	}
	return groupReply(res)
}

// groupCounts reads, on a Cluster, the count a Record on name passes to
// record.lua: the other members of group g open. ok is false when Redis
// did not answer within the call's decision bound (the trip then goes
// uncapped).
func (s *Store) groupCounts(ctx context.Context, g *policy.Group, name string) (breaker.GroupCounts, bool) {
	ctx, cancel := s.WithinDecision(ctx)
	defer cancel()
	_, open, err := s.runGroup(ctx, g.Name, "count", s.pinnedMs(), name)
	if err != nil {
		return breaker.GroupCounts{}, false
	}
	return breaker.GroupCounts{Open: open}, true
}

// indexGroup writes, on a Cluster, name's entries in group g's index from
// v, its view after a script: known while it holds state (scored with
// when that state expires, as save() sets its TTL, less any live probe
// lease), open while it denies (scored with a pin's or a pause's end when
// it has one). Errors are ignored (see above).
func (s *Store) indexGroup(ctx context.Context, g *policy.Group, name string, p policy.Policy, v breaker.View) {
	now := v.Now // Redis TIME (or the pin) when the breaker's script ran
	deadline, open, openUntil := "", "0", ""
	if v.Now != 0 { // the view of a breaker holding state
		switch {
		case (v.State == "forced_open" || v.State == "forced_closed") && v.ForceUntil == 0:
			deadline = "+inf"
		default:
			d := now + p.Retention().Milliseconds() + max(0, v.ProbeAt-now, v.ForceUntil-now, v.PauseUntil-now)
			deadline = strconv.FormatInt(d, 10)
		}
		openUntil = deadline
		switch v.State {
		case "open", "half_open":
			open = "1"
		case "paused", "forced_open": // until the pause's or the pin's end (breaker.State.OpenUntil)
			open = "1"
			if until := max(v.PauseUntil, v.ForceUntil); until > 0 {
				openUntil = strconv.FormatInt(until, 10)
			}
		}
	}
	if now == 0 {
		now = s.pinnedMs()
	}
	ctx, cancel := s.WithinDecision(ctx) // the call waits on it
	defer cancel()
	_, _, _ = s.runGroup(ctx, g.Name, "index", now, name, deadline, open, openUntil)
}

// pinnedMs is the pinned time (Options.Now), ms, or 0: Redis TIME decides.
func (s *Store) pinnedMs() int64 {
	if s.o.Now != nil {
		return s.o.Now().UnixMilli()
	}
	return 0
}

// GroupStatus returns group's counts now: its members holding state and, of
// them, the open ones (entries scored now or before dropped first). Errors are Redis
// failures.
func (s *Store) GroupStatus(ctx context.Context, group string) (known, open int64, err error) {
	known, open, err = s.runGroup(ctx, group, "status", s.pinnedMs(), "")
	if err != nil {
		return 0, 0, fmt.Errorf("store: group %q: %w", group, err)
	}
	return known, open, nil
}

// withGroup sets st's group fields from g (the group's counts are
// Get's, BatchGet's and List's: BatchGet reads them with the states).
func withGroup(st *pb.BreakerState, g *policy.Group) {
	if g != nil {
		st.Group, st.MaxOpenFraction, st.GroupMembers = g.Name, g.MaxOpenFraction, int64(len(g.Members))
	}
}
