package soak

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The topologies a run can start its Redis in (Config.Topology).
const (
	// TopologySentinel is a master, a replica and 3 sentinels (sentinel.go).
	TopologySentinel = "sentinel"
	// TopologyCluster is a Redis Cluster of 3 masters and 3 replicas
	// (cluster.go).
	TopologyCluster = "cluster"
)

// Topologies lists the topologies, the default first.
var Topologies = []string{TopologySentinel, TopologyCluster}

// redisSetup is the Redis a run started and the faults it can take.
type redisSetup struct {
	url     string                // the daemons' --redis-url
	cluster bool                  // the daemons' --redis-cluster
	rdb     redis.UniversalClient // the observer's client
	// masters returns the master holding each breaker's keys (nil: one
	// node for every breaker).
	masters func(ctx context.Context, names []string) (map[string]string, error)
	// nodes are every node's address (a Cluster): the masters' and the
	// replicas', for the pulse (one may take over).
	nodes []string
	// kill SIGKILLs a master, waits for its replica to take over and
	// resynchronises the observer; wipe SIGKILLs a master and starts it
	// again at once without persistence. Each says what happened in words.
	kill func(ctx context.Context, obs *Observer, names []string) string
	wipe func(ctx context.Context, obs *Observer) string
	// stall SIGSTOPs a master and SIGCONTs it before its replica would
	// take over (Observer.StalledOn); it says what happened in words.
	stall func(ctx context.Context, obs *Observer) string
	stop  func()
}

// redisPorts is how many ports a topology's Redis takes.
func redisPorts(topology string) (int, error) {
	switch topology {
	case TopologySentinel:
		return sentinelPorts, nil
	case TopologyCluster:
		return clusterPorts, nil
	}
	return 0, fmt.Errorf("unknown topology %q (want one of %v)", topology, Topologies)
}

// startRedis starts c.Topology's Redis on ports.
func startRedis(c Config, ports []int) (*redisSetup, error) {
	if c.Topology == TopologyCluster {
		return startCluster(c, ports)
	}
	return startSentinel(c, ports)
}
