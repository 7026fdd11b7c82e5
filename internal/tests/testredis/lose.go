package testredis

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// ReplyLoser is a go-redis dialer (Options.Dialer) whose connections lose
// replies on their way back. Armed with a pattern, the next commands
// written whose bytes contain it reach Redis and run; when a reply arrives
// on such a connection, the connection is closed instead of passing it
// on, as a network that broke after sending would. A dialer rather than a
// proxy: on a Cluster, a proxy in front of one node is bypassed once the
// client follows a MOVED to the node's own address, while every
// connection a client opens comes through its dialer.
type ReplyLoser struct {
	mu    sync.Mutex
	match []byte
	left  int

	lost atomic.Int64
}

// Arm makes the next n commands whose bytes contain pattern lose their
// replies (a command resent after a loss is one of them).
func (l *ReplyLoser) Arm(pattern string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.match, l.left = []byte(pattern), n
}

// Lost returns how many replies were lost so far.
func (l *ReplyLoser) Lost() int64 { return l.lost.Load() }

// Dial is the Options.Dialer: a plain TCP connection to addr, wrapped.
func (l *ReplyLoser) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &losingConn{Conn: c, l: l}, nil
}

// take reports whether the command bytes p are to lose their reply, and
// counts it.
func (l *ReplyLoser) take(p []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.left == 0 || !bytes.Contains(p, l.match) {
		return false
	}
	l.left--
	return true
}

type losingConn struct {
	net.Conn
	l      *ReplyLoser
	doomed atomic.Bool
}

func (c *losingConn) Write(p []byte) (int, error) {
	if c.l.take(p) {
		c.doomed.Store(true)
	}
	return c.Conn.Write(p)
}

// Read passes replies on until one arrives for a doomed command: Redis
// has run it then (a reply comes only after the command ran), and the
// connection breaks.
func (c *losingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.doomed.Load() {
		c.l.lost.Add(1)
		_ = c.Conn.Close()
		return 0, io.EOF
	}
	return n, err
}

// NewClientWith returns another client on the same server, as NewClient
// does, with its options changed by mod first (a dialer, the retries a
// daemon sets). It is closed when t ends.
func (b *Backend) NewClientWith(t testing.TB, mod func(o *redis.UniversalOptions)) redis.UniversalClient {
	o := &redis.UniversalOptions{Addrs: []string{b.Addr}, Username: b.Username, Password: b.Password}
	switch {
	case b.MasterName != "":
		o.Addrs, o.MasterName = b.Addrs, b.MasterName
	case b.Addrs != nil:
		o.Addrs, o.IsClusterMode = b.Addrs, true
	}
	mod(o)
	c := redis.NewUniversalClient(o)
	c.AddHook(counter{b})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
