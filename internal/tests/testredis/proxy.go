package testredis

import (
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Proxy is a TCP proxy a test puts between a daemon and Redis, to cut the
// link without stopping Redis (whose state must survive the outage), to
// stall it (nothing forwarded, connections kept open) or to slow it (each
// reply held back a while).
type Proxy struct {
	addr   string // the proxy's own address, stable across Cut/Restore
	target string

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]struct{}
	stalled bool
	// delay holds back every reply (Redis to client) this long.
	delay time.Duration
}

// NewProxy starts a proxy to target on a free loopback port. It is closed
// when t ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p := &Proxy{target: target, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.Cut)
	return p
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.addr }

// Cut closes every connection and stops listening: clients get connection
// refused until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

// Stall keeps every connection open but forwards nothing, so every
// command times out; Restore ends it (dropping the stalled connections,
// whose streams lost bytes).
func (p *Proxy) Stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

// Resume forwards again on the connections a Stall held open, without
// closing them: a link that heals. What was swallowed stays lost, so a
// command sent during the stall never gets its reply; connections
// accepted during the stall stay silent.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.stalled = false
	p.mu.Unlock()
}

// Delay holds back every reply from Redis by d before forwarding it (0:
// none): commands still reach Redis at once, and their replies arrive d
// late, in order. Restore ends it too.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Restore listens again on the same address and forwards as before.
func (p *Proxy) Restore(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	p.stalled, p.delay = false, 0
	for c := range p.conns { // stalled connections: drop, clients redial
		_ = c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
	listening := p.ln != nil
	p.mu.Unlock()
	if listening {
		return
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns[c] = struct{}{}
			stalled := p.stalled
			p.mu.Unlock()
			if !stalled {
				go p.forward(c)
			}
		}
	}()
}

func (p *Proxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	pipe := func(dst, src net.Conn, reply bool) {
		defer dst.Close()
		defer src.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				return // either side closed (a Cut, a Restore after a Stall)
			}
			p.mu.Lock()
			stalled, delay := p.stalled, p.delay
			p.mu.Unlock()
			if stalled {
				continue // swallowed: the command never reaches Redis
			}
			if reply && delay > 0 {
				time.Sleep(delay) // a slow link or server: the reply comes late
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
	go pipe(up, c, false)
	go pipe(c, up, true)
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
