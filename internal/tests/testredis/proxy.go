package testredis

import (
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/faultproxy"
)

// Proxy is a TCP proxy a test puts between a daemon and Redis, to cut the
// link without stopping Redis (whose state must survive the outage), to
// stall it (nothing forwarded, connections kept open) or to slow it (each
// reply held back a while): a faultproxy.Proxy closed when the test ends.
type Proxy struct {
	*faultproxy.Proxy
}

// NewProxy starts a proxy to target on a free loopback port. It is closed
// when t ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := faultproxy.New("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return &Proxy{p}
}

// Restore listens again on the same address and forwards as before
// (faultproxy.Proxy.Restore), failing t when it cannot listen.
func (p *Proxy) Restore(t testing.TB) {
	t.Helper()
	if err := p.Proxy.Restore(); err != nil {
		t.Fatalf("proxy: listen again on %s: %v", p.Addr(), err)
	}
}

// ClientVia returns a client of the backend's server reached at addr (a
// Proxy's address), counted like the backend's own clients. mod, when
// set, adjusts its options (timeouts). It is closed when t ends.
func (b *Backend) ClientVia(t testing.TB, addr string, mod func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: addr}
	if mod != nil {
		mod(o)
	}
	c := redis.NewClient(o)
	c.AddHook(counter{b})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// StallTier skips t unless the Redis tiers run (EnvAddr is set): the
// stall tests wait out a daemon's own bounds on real time, so they stay
// out of the unit tier `go test ./...` runs without Redis.
func StallTier(t testing.TB) {
	t.Helper()
	if os.Getenv(EnvAddr) == "" {
		t.Skipf("%s is unset: skipping the stall tests (they run with the Redis tiers)", EnvAddr)
	}
}
