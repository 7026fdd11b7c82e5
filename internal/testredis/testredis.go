// Package testredis gives tests the Redis backends the behaviour suite runs
// on: an in-process miniredis, always, and a real Redis when the
// BREAKERD_TEST_REDIS_ADDR environment variable names one (host:port).
// Both come with a clock the test moves without sleeping and a counter of
// the round trips the code under test makes.
package testredis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// EnvAddr names the environment variable with the real Redis's address.
const EnvAddr = "BREAKERD_TEST_REDIS_ADDR"

// Backend is one Redis for one test.
type Backend struct {
	// Name is "miniredis" or "redis".
	Name string
	// Addr is the server's host:port.
	Addr string
	// Mini is the in-process server, nil on a real Redis.
	Mini *miniredis.Miniredis
	// Client is a client whose round trips are counted.
	Client *redis.Client
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
// real Redis is skipped, with the reason, only when EnvAddr is unset.
func Each(t *testing.T, fn func(t *testing.T, b *Backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) { fn(t, Mini(t)) })
	t.Run("redis", func(t *testing.T) { fn(t, Real(t)) })
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

// deleteKeys removes every key of this test's breakers and hooks (whose
// names start with Prefix), so that runs leave nothing behind on a shared
// Redis.
func (b *Backend) deleteKeys(t testing.TB) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: b.Addr})
	defer c.Close()
	var keys []string
	for _, pattern := range []string{"brk:{" + globEscape(b.Prefix) + "*", "breakerd:hooks:" + globEscape(b.Prefix) + "*"} {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		if err := it.Err(); err != nil {
			t.Errorf("testredis: cleanup scan: %v", err)
			return
		}
	}
	if len(keys) > 0 {
		if err := c.Del(ctx, keys...).Err(); err != nil {
			t.Errorf("testredis: cleanup: %v", err)
		}
	}
}

// globEscape escapes the characters SCAN MATCH treats as patterns.
func globEscape(s string) string {
	var out strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			out.WriteByte('\\')
		}
		out.WriteRune(r)
	}
	return out.String()
}

func (b *Backend) init(t testing.TB) {
	b.Prefix = fmt.Sprintf("%s-%08x/", strings.ReplaceAll(t.Name(), "/", "."), rand.Uint32())
	b.Client = b.NewClient(t)
}

// NewClient returns another client on the same server (a second daemon's
// connection), counted like the first. It is closed when t ends.
func (b *Backend) NewClient(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: b.Addr, Username: b.Username, Password: b.Password})
	c.AddHook(counter{b})
	t.Cleanup(func() { _ = c.Close() })
	return c
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

// FreeAddr returns a loopback address nothing listens on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
