package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Keeping is how a Redis node keeps breakerd's keys, as its INFO tells:
// whether it may evict them and whether they survive a restart. What each
// setting buys: docs/reliability.md, "Redis that forgets".
type Keeping struct {
	// Addr names the node (its address on a Cluster; "" on a single Redis).
	Addr string
	// Told is false when INFO does not show the fields below (the embedded
	// Redis, which neither evicts nor persists).
	Told bool
	// Policy is maxmemory_policy: noeviction, allkeys-lru, volatile-ttl...
	Policy string
	// MaxMemory is maxmemory, bytes: 0 means no limit, so no eviction.
	MaxMemory int64
	// AOF is aof_enabled: every write is logged and replayed at a restart.
	AOF bool
	// RunID is run_id: it changes on every restart of the node.
	RunID string
}

// EvictionRisk reports whether the node may evict breakerd's keys: it has
// a memory limit and a policy other than noeviction. Every breakerd key
// has a TTL, so the volatile-* policies take them first.
func (k Keeping) EvictionRisk() bool {
	return k.Told && k.MaxMemory > 0 && k.Policy != "noeviction"
}

// Keepings runs INFO on the Redis (on each master of a Cluster) and says
// how each keeps breakerd's keys.
func (s *Store) Keepings(ctx context.Context) ([]Keeping, error) {
	nodes, err := s.scanNodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Keeping, 0, len(nodes))
	for _, n := range nodes {
		text, err := n.c.Info(ctx).Result()
		if err != nil {
			return nil, fmt.Errorf("store: info %s: %w", n.addr, err)
		}
		k := KeepingOf(text)
		k.Addr = n.addr
		out = append(out, k)
	}
	return out, nil
}

// KeepingOf reads the fields Keeping needs from an INFO reply.
func KeepingOf(info string) Keeping {
	var k Keeping
	for _, line := range strings.Split(info, "\n") {
		key, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch key {
		case "maxmemory_policy":
			k.Policy, k.Told = v, true
		case "maxmemory":
			k.MaxMemory, _ = strconv.ParseInt(v, 10, 64)
		case "aof_enabled":
			k.AOF = v == "1"
		case "run_id":
			k.RunID = v
		}
	}
	return k
}
