package limits

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// pool is a Conns on a loopback listener, with a clock the test moves.
type pool struct {
	t     *testing.T
	c     *Conns
	addr  string
	conns chan net.Conn
	mu    sync.Mutex
	now   time.Time
}

// newPool serves a Conns of l on 127.0.0.1; every accepted connection
// goes to p.conns.
func newPool(t *testing.T, l Listener) *pool {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := NewConns(l)
	p := &pool{t: t, c: c, addr: raw.Addr().String(), conns: make(chan net.Conn, 64), now: time.Unix(1_000_000, 0)}
	c.now = func() time.Time { p.mu.Lock(); defer p.mu.Unlock(); return p.now }
	lis := c.Listen(raw)
	t.Cleanup(func() { _ = lis.Close() })
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			p.conns <- conn
		}
	}()
	return p
}

func (p *pool) advance(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now = p.now.Add(d)
}

// dial connects from the loopback address from (127.0.0.1 when "") and
// returns the client's end and, when admitted, the server's (nil when
// the daemon closed it at accept).
func (p *pool) dial(from string) (client net.Conn, server *Conn) {
	p.t.Helper()
	d := net.Dialer{}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	client, err := d.Dial("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { _ = client.Close() })
	// The listener either hands the connection on or closes it: the
	// client's read tells which when nothing is handed on.
	got := make(chan error, 1)
	go func() {
		_, err := client.Read(make([]byte, 1))
		got <- err
	}()
	select {
	case s := <-p.conns:
		return client, s.(*Conn)
	case <-got:
		return client, nil
	}
}

// closedByServer waits for the server to close client's connection.
func closedByServer(t *testing.T, client net.Conn, what string) {
	t.Helper()
	if _, err := client.Read(make([]byte, 1)); err == nil {
		t.Fatalf("%s: read a byte, want the connection closed", what)
	} else if !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("%s: %v, want the connection closed", what, err)
	}
}

func authenticate(c *Conns, cn *Conn) { Authenticate(c.ConnContext(context.Background(), cn)) }

// TestSecurityPreAuthConnectionsGiveWayAtTheCap (N1): at --max-conns a
// new connection evicts the longest-idle connection that has made no
// authenticated call, never an authenticated one; only when every
// connection held is authenticated is the new one refused.
func TestSecurityPreAuthConnectionsGiveWayAtTheCap(t *testing.T) {
	p := newPool(t, Listener{MaxConns: 3, FDReserve: -1, PreAuthPerSource: -1})
	oldC, _ := p.dial("")
	p.advance(time.Second)
	_, worker := p.dial("")
	authenticate(p.c, worker)
	p.advance(time.Second)
	recentC, recent := p.dial("")
	p.advance(time.Second)
	busyC, busy := p.dial("")
	if busy == nil {
		t.Fatal("a fourth connection at a cap of 3 with two pre-auth held: refused, want admitted")
	}
	closedByServer(t, oldC, "the longest-idle pre-auth connection at the cap")
	if got := p.c.Stats(); got.Open != 3 || got.PreAuth != 2 || got.Evicted != 1 {
		t.Errorf("after one eviction: %+v, want 3 open, 2 pre-auth, 1 evicted", got)
	}
	// A call in flight keeps a connection longer than an idle one, even
	// one whose last call began later.
	busy.beginCall()
	defer busy.endCall()
	p.advance(time.Second)
	recent.beginCall()
	recent.endCall()
	_, next := p.dial("")
	if next == nil {
		t.Fatal("a connection at the cap with pre-auth ones held: refused")
	}
	closedByServer(t, recentC, "the idle pre-auth connection, before the busy one")
	if _, err := busyC.Write([]byte("x")); err != nil {
		t.Errorf("the busy pre-auth connection: %v, want it kept", err)
	}
	authenticate(p.c, busy)
	authenticate(p.c, next)
	if _, refused := p.dial(""); refused != nil {
		t.Fatal("a connection at the cap with every held one authenticated: admitted, want refused")
	}
	if got := p.c.Stats(); got.Refused != 1 || got.PreAuth != 0 || got.Evicted != 2 || got.Open != 3 {
		t.Errorf("stats %+v, want 3 open, 0 pre-auth, 2 evicted, 1 refused", got)
	}
}

// TestSecurityPreAuthConnectionsAreCappedPerSource (N1): one source (an
// IPv4 address) holds at most --preauth-conns-per-source pre-auth
// connections: its next evicts its own longest-idle, and another source
// keeps its connections.
func TestSecurityPreAuthConnectionsAreCappedPerSource(t *testing.T) {
	p := newPool(t, Listener{MaxConns: 100, FDReserve: -1, PreAuthPerSource: 2})
	_, other := p.dial("127.0.0.1")
	firstC, _ := p.dial("127.0.0.2")
	p.advance(time.Second)
	p.dial("127.0.0.2")
	p.advance(time.Second)
	if _, third := p.dial("127.0.0.2"); third == nil {
		t.Fatal("a third connection from one source at its cap of 2: refused, want it to evict the source's oldest")
	}
	closedByServer(t, firstC, "the source's longest-idle pre-auth connection")
	got := p.c.Stats()
	if got.EvictedPerSource != 1 || got.Open != 3 || other == nil {
		t.Errorf("stats %+v, want 1 evicted per source and 3 open (the other source's kept)", got)
	}
}

// TestSecurityPreAuthConnectionsCloseWhenIdle (N1): a pre-auth
// connection that starts no call for --preauth-idle is closed by Sweep;
// an authenticated one, and one whose call started since, are not.
func TestSecurityPreAuthConnectionsCloseWhenIdle(t *testing.T) {
	p := newPool(t, Listener{MaxConns: 10, FDReserve: -1, PreAuthIdle: 30 * time.Second})
	idleC, _ := p.dial("")
	_, worker := p.dial("")
	authenticate(p.c, worker)
	_, active := p.dial("")
	p.advance(20 * time.Second)
	active.beginCall()
	active.endCall()
	if n := p.c.Sweep(); n != 0 {
		t.Fatalf("Sweep after 20s: closed %d, want 0", n)
	}
	p.advance(11 * time.Second)
	if n := p.c.Sweep(); n != 1 {
		t.Fatalf("Sweep after 31s: closed %d, want 1 (the idle pre-auth connection)", n)
	}
	closedByServer(t, idleC, "the idle pre-auth connection")
	if got := p.c.Stats(); got.ClosedIdle != 1 || got.Open != 2 {
		t.Errorf("stats %+v, want 1 closed idle, 2 open", got)
	}
}

// TestSecurityConnectionCapsLogOneSummary (N1): what the caps did is
// logged as one line per interval, naming the counts and the sources
// holding the most pre-auth connections; nothing when nothing happened.
func TestSecurityConnectionCapsLogOneSummary(t *testing.T) {
	p := newPool(t, Listener{MaxConns: 1, FDReserve: -1, PreAuthPerSource: -1})
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	last := p.c.logSummary(log, "api", ConnStats{})
	if buf.Len() != 0 {
		t.Fatalf("nothing happened, logged %q", buf.String())
	}
	for range 5 {
		p.dial("127.0.0.3")
	}
	p.c.logSummary(log, "api", last)
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, "evicted_at_cap=4") || !strings.Contains(out, "127.0.0.3 (1)") {
		t.Errorf("summary %q, want one line with evicted_at_cap=4 and the source 127.0.0.3", out)
	}
}

func TestSourceGroupsIPv6By64(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"192.0.2.7:5000", "192.0.2.7"},
		{"[::ffff:192.0.2.7]:5000", "192.0.2.7"},
		{"[2001:db8:1:2:3:4:5:6]:5000", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:6000", "2001:db8:1:2::/64"},
	} {
		a, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := Source(a); got != tc.want {
			t.Errorf("Source(%s) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}
