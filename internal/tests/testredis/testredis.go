// Package testredis gives tests the Redis backends the behaviour suite runs
// on: an in-process miniredis, always; a real Redis when the
// BREAKERD_TEST_REDIS_ADDR environment variable names one (host:port); and
// a real Redis Cluster when BREAKERD_TEST_REDIS_CLUSTER_ADDRS names some of
// its nodes (host:port,host:port; scripts/redis-cluster.sh starts one).
// Each comes with a clock the test moves without sleeping and a counter of
// the round trips the code under test makes.
package testredis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/store"
)

// EnvAddr names the environment variable with the real Redis's address.
const EnvAddr = "BREAKERD_TEST_REDIS_ADDR"

// EnvClusterAddrs names the environment variable with the addresses of
// some nodes of a real Redis Cluster, comma-separated host:port.
const EnvClusterAddrs = "BREAKERD_TEST_REDIS_CLUSTER_ADDRS"

// Backend is one Redis for one test.
type Backend struct {
	// Name is "miniredis", "redis" or "cluster".
	Name string
	// Addr is the server's host:port; on a cluster, the first node's.
	Addr string
	// Addrs are the cluster's nodes as the environment named them, or the
	// sentinels; nil on a single server.
	Addrs []string
	// MasterName is the master the sentinels at Addrs watch; empty unless
	// the backend is a Sentinel setup.
	MasterName string
	// Mini is the in-process server, nil on a real Redis.
	Mini *miniredis.Miniredis
	// Client is a client whose round trips are counted: a
	// *redis.ClusterClient on a cluster, a *redis.Client otherwise.
	Client redis.UniversalClient
	// Prefix makes names unique to this test, so tests share a real Redis
	// without seeing each other's breakers.
	Prefix string
	// Username and Password, when set, are the credentials of the clients
	// NewClient makes from then on (a daemon's connections, under a
	// restricted ACL user); Client and the cleanup keep the admin
	// connection.
	Username, Password string

	pinned   atomic.Int64 // ns since epoch: the pinned clock (real Redis)
	miniNow  atomic.Int64 // ns since epoch: miniredis's clock
	commands atomic.Int64
	trips    atomic.Int64
}

// Each runs fn as a subtest on every backend the environment allows: the
// real Redis is skipped, with the reason, only when EnvAddr is unset, and
// the cluster only when EnvClusterAddrs is.
func Each(t *testing.T, fn func(t *testing.T, b *Backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) { fn(t, Mini(t)) })
	t.Run("redis", func(t *testing.T) { fn(t, Real(t)) })
	t.Run("cluster", func(t *testing.T) { fn(t, Cluster(t)) })
}

// Mini returns a fresh miniredis backend with its clock set to now.
func Mini(t testing.TB) *Backend {
	t.Helper()
	m := miniredis.RunT(t)
	b := &Backend{Name: "miniredis", Addr: m.Addr(), Mini: m}
	b.miniNow.Store(time.Now().UnixNano())
	m.SetTime(time.Unix(0, b.miniNow.Load()))
	b.init(t)
	return b
}

// Stop ends m as a Redis that goes away while a daemon still uses it:
// its listener and connections first, waiting for the commands it is
// running to end, then m itself. miniredis's own Close clears its server
// before it ends the commands in hand, and an INFO in hand (a daemon's
// check of how Redis keeps its keys) then dereferences nil and panics.
func Stop(m *miniredis.Miniredis) {
	if s := m.Server(); s != nil {
		s.Close()
	}
	m.Close()
}

// Real returns a backend on the real Redis at EnvAddr, or skips t when the
// variable is unset. It fails t when the variable is set but Redis does not
// answer: a CI that meant to test on Redis must not pass without it.
func Real(t testing.TB) *Backend {
	t.Helper()
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		t.Skipf("%s is unset: skipping the real-Redis run (set it to host:port to run it)", EnvAddr)
	}
	b := &Backend{Name: "redis", Addr: addr}
	b.pinned.Store(time.Now().UnixNano())
	b.init(t)
	if err := b.Client.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("%s=%s but Redis does not answer: %v", EnvAddr, addr, err)
	}
	b.ResetCounts()
	t.Cleanup(func() { b.deleteKeys(t) })
	return b
}

// Cluster returns a backend on the Redis Cluster at EnvClusterAddrs, or
// skips t when the variable is unset. It fails t when the variable is set
// but the cluster does not answer, or answers that it is not ok.
func Cluster(t testing.TB) *Backend {
	t.Helper()
	env := os.Getenv(EnvClusterAddrs)
	if env == "" {
		t.Skipf("%s is unset: skipping the Redis Cluster run (scripts/redis-cluster.sh start prints a value)", EnvClusterAddrs)
	}
	b := ClusterAt(t, strings.Split(env, ","))
	t.Cleanup(func() { b.deleteKeys(t) })
	return b
}

// ClusterAt returns a backend on the Redis Cluster whose nodes include
// addrs (a test's own cluster, removed with its keys when the test ends:
// a test that kills a master leaves it in the slot map until its replica
// takes over). It fails t when the cluster is not ok.
func ClusterAt(t testing.TB, addrs []string) *Backend {
	t.Helper()
	b := &Backend{Name: "cluster", Addr: addrs[0], Addrs: addrs}
	b.pinned.Store(time.Now().UnixNano())
	b.init(t)
	info, err := b.Client.ClusterInfo(context.Background()).Result()
	if err != nil {
		t.Fatalf("Redis Cluster at %v does not answer: %v", addrs, err)
	}
	if !strings.Contains(info, "cluster_state:ok") {
		t.Fatalf("Redis Cluster at %v is not ok:\n%s", addrs, info)
	}
	b.ResetCounts()
	return b
}

// SentinelAt returns a backend on the master the sentinels at addrs watch
// under the name master (a test's own Sentinel setup). It fails t when the
// master does not answer.
func SentinelAt(t testing.TB, master string, addrs []string) *Backend {
	t.Helper()
	b := &Backend{Name: "sentinel", Addr: addrs[0], Addrs: addrs, MasterName: master}
	b.pinned.Store(time.Now().UnixNano())
	b.init(t)
	if err := b.Client.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("Sentinel master %q via %v does not answer: %v", master, addrs, err)
	}
	b.ResetCounts()
	t.Cleanup(func() { b.deleteKeys(t) })
	return b
}

// deleteKeys removes every key of this test's breakers and hooks (whose
// names start with Prefix), so that runs leave nothing behind on a shared
// Redis: on a cluster, from every master, one key at a time (keys of
// different breakers live in different slots).
func (b *Backend) deleteKeys(t testing.TB) {
	ctx := context.Background()
	c := b.newClient("", "") // the admin connection
	defer c.Close()
	del := func(ctx context.Context, c redis.Cmdable) error {
		var keys []string
		for _, pattern := range store.KeyPatterns(b.Prefix) {
			it := c.Scan(ctx, 0, pattern, 1000).Iterator()
			for it.Next(ctx) {
				keys = append(keys, it.Val())
			}
			if err := it.Err(); err != nil {
				return fmt.Errorf("scan: %w", err)
			}
		}
		for _, k := range keys {
			if err := c.Del(ctx, k).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return del(ctx, c) })
	} else {
		err = del(ctx, c)
	}
	if err != nil {
		t.Errorf("testredis: cleanup: %v", err)
	}
}

func (b *Backend) init(t testing.TB) {
	b.Prefix = fmt.Sprintf("%s-%08x/", strings.ReplaceAll(t.Name(), "/", "."), rand.Uint32())
	b.Client = b.NewClient(t)
}

// NewClient returns another client on the same server (a second daemon's
// connection), counted like the first. It is closed when t ends.
func (b *Backend) NewClient(t testing.TB) redis.UniversalClient {
	c := b.newClient(b.Username, b.Password)
	c.AddHook(counter{b})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newClient returns an uncounted client with the given credentials: a
// cluster client on a cluster, a failover client through Sentinel.
func (b *Backend) newClient(username, password string) redis.UniversalClient {
	if b.MasterName != "" {
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: b.MasterName, SentinelAddrs: b.Addrs,
			Username: username, Password: password})
	}
	if b.Addrs != nil {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: b.Addrs, Username: username, Password: password})
	}
	return redis.NewClient(&redis.Options{Addr: b.Addr, Username: username, Password: password})
}

// URL returns the --redis-url (and --redis-cluster) that reaches this
// backend, for tests that run the daemon's real assembly.
func (b *Backend) URL() (u string, cluster bool) {
	if b.Addrs == nil {
		return "redis://" + b.Addr, false
	}
	q := url.Values{"addr": b.Addrs[1:]}
	if b.MasterName != "" {
		q.Set("master_name", b.MasterName)
		return "redis://" + b.Addrs[0] + "?" + q.Encode(), false
	}
	return "redis://" + b.Addrs[0] + "?" + q.Encode(), true
}

// Name returns a breaker name unique to this test.
func (b *Backend) Breaker(name string) string { return b.Prefix + name }

// Advance moves the server's clock forward by d without sleeping: miniredis
// through SetTime (TIME) and FastForward (TTLs), a real Redis through the
// time the store pins (its TTLs keep real time).
func (b *Backend) Advance(d time.Duration) {
	if b.Mini != nil {
		b.Mini.SetTime(time.Unix(0, b.miniNow.Add(int64(d))))
		b.Mini.FastForward(d)
		return
	}
	b.pinned.Add(int64(d))
}

// Clock is the store's Now for this backend: nil on miniredis, whose TIME
// the test moves, so the scripts' TIME path is exercised there; a pinned
// clock on a real Redis, whose TIME nobody can move.
func (b *Backend) Clock() func() time.Time {
	if b.Mini != nil {
		return nil
	}
	return func() time.Time { return time.Unix(0, b.pinned.Load()) }
}

// Now is the backend's clock as Advance moves it: miniredis's TIME, or the
// time the store pins on a real Redis. A store given it as its Now names
// its savings buckets on the clock its events are dated by.
func (b *Backend) Now() time.Time {
	if b.Mini != nil {
		return time.Unix(0, b.miniNow.Load())
	}
	return time.Unix(0, b.pinned.Load())
}

// RoundTrips returns the round trips made through counted clients since
// the last ResetCounts: a pipeline is one.
func (b *Backend) RoundTrips() int64 { return b.trips.Load() }

// Commands returns the commands sent through counted clients since the last
// ResetCounts.
func (b *Backend) Commands() int64 { return b.commands.Load() }

// ResetCounts zeroes RoundTrips and Commands.
func (b *Backend) ResetCounts() {
	b.trips.Store(0)
	b.commands.Store(0)
}

type counter struct{ b *Backend }

func (counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isHandshake(cmd) {
			c.b.trips.Add(1)
			c.b.commands.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, cmd := range cmds {
			if !isHandshake(cmd) {
				n++
			}
		}
		if n > 0 {
			c.b.trips.Add(1)
			c.b.commands.Add(int64(n))
		}
		return next(ctx, cmds)
	}
}

// isHandshake tells the commands go-redis sends when it opens a connection.
func isHandshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}
