package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// EventsKey returns the key of the breaker's durable event stream,
// brk:{<name>}:events.
func EventsKey(breaker string) string { return keys(breaker)[2] }

// eventsKeyPattern matches every breaker's event stream (for SCAN).
const eventsKeyPattern = Prefix + "{*}:events"

// EventStreams returns the name of every breaker that has an event stream.
// It SCANs the keyspace (every master, on a Cluster): for background
// sweeps, not hot paths.
func (s *Store) EventStreams(ctx context.Context) ([]string, error) {
	return s.scanNames(ctx, eventsKeyPattern, "events")
}

// EventFromStream decodes one entry of a breaker's event stream, as
// lib.lua's emit() writes it (XADD fields breaker, kind, from, to, gen,
// reason, failures, workers, cooldown_ms, at_ms, actor).
func EventFromStream(m redis.XMessage) (*pb.Event, error) {
	str := func(f string) string { v, _ := m.Values[f].(string); return v }
	num := func(f string) int64 { n, _ := strconv.ParseInt(str(f), 10, 64); return n }
	k, ok := kinds[str("kind")]
	if !ok {
		return nil, fmt.Errorf("store: decode stream entry %s: unknown kind %q", m.ID, str("kind"))
	}
	return &pb.Event{
		Id: m.ID, Breaker: str("breaker"), Kind: k, From: stateNames[str("from")], To: stateNames[str("to")],
		Generation: num("gen"), Reason: str("reason"), Failures: num("failures"),
		DistinctWorkers: num("workers"), CooldownMs: num("cooldown_ms"), AtMs: num("at_ms"), Actor: str("actor"),
	}, nil
}
