package limits

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Conns caps the connections open over every listener it wraps (Listen),
// and sorts them in two. A connection is authenticated once it has made
// an authenticated call (with tokens off: once a call to the API, not
// health or reflection, succeeded on it); until then it is pre-auth.
// Only pre-auth connections give way:
//
//   - At the cap a new connection evicts the longest-idle pre-auth one
//     (an idle one before one with a call in flight); it is closed as it
//     is accepted only when every connection held is authenticated.
//   - At PreAuthPerSource a new connection from that source (Source)
//     evicts that source's longest-idle pre-auth connection.
//   - A pre-auth connection that starts no call for PreAuthIdle is closed
//     (Sweep, run by Run).
//
// So no number of connections that never authenticate keeps a worker
// with a token, or a health check, from connecting. The daemon's
// servers report calls and authentication through the connection in a
// call's context: ConnContext and Track for HTTP, Calls for gRPC.
// Conns is safe for concurrent use.
type Conns struct {
	limit, perSource int
	idle             time.Duration
	now              func() time.Time

	mu     sync.Mutex
	open   int
	pre    map[*Conn]struct{}            // the pre-auth connections
	bySrc  map[string]map[*Conn]struct{} // the pre-auth connections per source
	byAddr map[ends]*Conn                // every connection, by endsOf

	refused, evicted, evictedSource, closedIdle atomic.Int64
}

// NewConns returns the connection cap of l: MaxConns, lowered to the
// process's file limit less FDReserve (never below 1), with l's
// PreAuthIdle and PreAuthPerSource. Its second result says what the cap
// was lowered from, "" when it was not.
func NewConns(l Listener) (*Conns, string) {
	l = l.WithDefaults()
	limit, why, reserve := l.MaxConns, "", max(l.FDReserve, 0)
	if files, ok := fileLimit(); ok && files-reserve < limit {
		limit = max(files-reserve, 1)
		why = fmt.Sprintf("the file limit (RLIMIT_NOFILE %d) less the reserve of %d", files, reserve)
	}
	return &Conns{limit: limit, perSource: l.PreAuthPerSource, idle: l.PreAuthIdle, now: time.Now,
		pre: map[*Conn]struct{}{}, bySrc: map[string]map[*Conn]struct{}{}, byAddr: map[ends]*Conn{}}, why
}

// Limit is the cap: connections open at once over every listener.
func (c *Conns) Limit() int { return c.limit }

// ConnStats are a Conns' counts: those open now, and events since the
// start.
type ConnStats struct {
	// Open and PreAuth are the connections open now, and how many of them
	// are pre-auth.
	Open, PreAuth int
	// Refused counts connections closed at accept: the cap was reached
	// and every connection held was authenticated.
	Refused int64
	// Evicted counts pre-auth connections closed to admit a new one at
	// the cap; EvictedPerSource, at their source's PreAuthPerSource.
	Evicted, EvictedPerSource int64
	// ClosedIdle counts pre-auth connections closed after PreAuthIdle
	// without a call.
	ClosedIdle int64
}

// Stats returns c's counts.
func (c *Conns) Stats() ConnStats {
	c.mu.Lock()
	open, pre := c.open, len(c.pre)
	c.mu.Unlock()
	return ConnStats{Open: open, PreAuth: pre, Refused: c.refused.Load(), Evicted: c.evicted.Load(),
		EvictedPerSource: c.evictedSource.Load(), ClosedIdle: c.closedIdle.Load()}
}

// Source names the source a connection from a counts under: an IPv4
// address, or an IPv6 address's /64 (what one host, or one customer of
// a provider, is given).
func Source(a net.Addr) string {
	if a == nil {
		return "unknown"
	}
	var ip netip.Addr
	if t, ok := a.(*net.TCPAddr); ok {
		ip, _ = netip.AddrFromSlice(t.IP)
	} else if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		ip = ap.Addr()
	}
	if ip = ip.Unmap(); !ip.IsValid() {
		return a.String()
	}
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.Prefix(64)
	return p.String()
}

// ends keys a connection by its two ends, as a gRPC server reports
// them (peer.Peer): TCP addresses as they are, so that finding a call's
// connection builds no string; any other kind by its text.
type ends struct {
	local, remote netip.AddrPort
	other         string
}

// endsOf is the key of the connection from remote to local; the zero
// ends when either is unknown.
func endsOf(local, remote net.Addr) ends {
	l, lok := local.(*net.TCPAddr)
	r, rok := remote.(*net.TCPAddr)
	if lok && rok {
		return ends{local: unmapped(l.AddrPort()), remote: unmapped(r.AddrPort())}
	}
	if local == nil || remote == nil {
		return ends{}
	}
	return ends{other: local.String() + " " + remote.String()}
}

func unmapped(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// byEnds returns the connection from remote to local, or nil.
func (c *Conns) byEnds(local, remote net.Addr) *Conn {
	key := endsOf(local, remote)
	if key == (ends{}) {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byAddr[key]
}

// Listen wraps lis: each connection it accepts is admitted (evicting a
// pre-auth connection if it must) or closed at once, so a flood holds no
// more than the cap of file descriptors.
func (c *Conns) Listen(lis net.Listener) net.Listener { return &capped{Listener: lis, c: c} }

type capped struct {
	net.Listener
	c *Conns
}

func (l *capped) Accept() (net.Conn, error) {
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if cn := l.c.admit(raw); cn != nil {
			return cn, nil
		}
		_ = raw.Close()
	}
}

// admit places raw, evicting what it must, or returns nil (refused).
func (c *Conns) admit(raw net.Conn) *Conn {
	cn := &Conn{Conn: raw, c: c, source: Source(raw.RemoteAddr()), addr: endsOf(raw.LocalAddr(), raw.RemoteAddr())}
	cn.last.Store(c.now().UnixNano())
	// Another listener's accept may evict the same victim first: try a
	// few times, then refuse.
	for range 8 {
		victim, perSource, placed := c.place(cn)
		if placed {
			return cn
		}
		if victim == nil {
			break
		}
		switch {
		case !victim.shut():
		case perSource:
			c.evictedSource.Add(1)
		default:
			c.evicted.Add(1)
		}
	}
	c.refused.Add(1)
	return nil
}

// place adds cn when there is room, or names the connection to evict
// first (perSource: at its source's cap), or neither (refuse cn).
func (c *Conns) place(cn *Conn) (victim *Conn, perSource, placed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.perSource > 0 && len(c.bySrc[cn.source]) >= c.perSource {
		return longestIdle(c.bySrc[cn.source]), true, false
	}
	if c.open >= c.limit {
		return longestIdle(c.pre), false, false
	}
	c.open++
	c.pre[cn] = struct{}{}
	if c.bySrc[cn.source] == nil {
		c.bySrc[cn.source] = map[*Conn]struct{}{}
	}
	c.bySrc[cn.source][cn] = struct{}{}
	if cn.addr != (ends{}) {
		c.byAddr[cn.addr] = cn
	}
	return nil, false, true
}

// longestIdle returns the connection of set to evict: an idle one (no
// call in flight) before a busy one, and among those the one whose last
// call started longest ago (or, without a call, that was accepted
// first). A scan: eviction is rare next to calls, which only store a
// time.
func longestIdle(set map[*Conn]struct{}) *Conn {
	var best *Conn
	for cn := range set {
		if best == nil || cn.evictsBefore(best) {
			best = cn
		}
	}
	return best
}

// Sweep closes the pre-auth connections that started no call for
// PreAuthIdle, and returns how many.
func (c *Conns) Sweep() int {
	cut := c.now().Add(-c.idle).UnixNano()
	c.mu.Lock()
	var idle []*Conn
	for cn := range c.pre {
		if cn.last.Load() < cut {
			idle = append(idle, cn)
		}
	}
	c.mu.Unlock()
	n := 0
	for _, cn := range idle {
		if cn.shut() {
			n++
		}
	}
	c.closedIdle.Add(int64(n))
	return n
}

// Run sweeps (Sweep) every third of PreAuthIdle and logs once a minute,
// on log, what the caps did in that minute (when they did anything),
// naming the listeners as what; until ctx ends.
func (c *Conns) Run(ctx context.Context, log *slog.Logger, what string) {
	sweep := time.NewTicker(max(c.idle/3, time.Millisecond))
	defer sweep.Stop()
	minute := time.NewTicker(time.Minute)
	defer minute.Stop()
	var last ConnStats
	for {
		select {
		case <-ctx.Done():
			return
		case <-sweep.C:
			c.Sweep()
		case <-minute.C:
			last = c.logSummary(log, what, last)
		}
	}
}

// logSummary logs what changed since last, if anything, and returns the
// counts now.
func (c *Conns) logSummary(log *slog.Logger, what string, last ConnStats) ConnStats {
	now := c.Stats()
	refused, evicted := now.Refused-last.Refused, now.Evicted-last.Evicted
	perSource, idle := now.EvictedPerSource-last.EvictedPerSource, now.ClosedIdle-last.ClosedIdle
	if refused+evicted+perSource+idle == 0 {
		return now
	}
	log.Warn("connections: pre-auth connections (no authenticated call yet) evicted or closed in the last minute",
		"listeners", what, "refused_all_authenticated", refused, "evicted_at_cap", evicted,
		"evicted_per_source", perSource, "closed_idle", idle, "open", now.Open, "pre_auth", now.PreAuth,
		"max_conns", c.limit, "top_pre_auth_sources", c.topSources(3))
	return now
}

// topSources names the n sources holding the most pre-auth connections,
// with their counts.
func (c *Conns) topSources(n int) []string {
	type src struct {
		name string
		held int
	}
	c.mu.Lock()
	all := make([]src, 0, len(c.bySrc))
	for s, set := range c.bySrc {
		all = append(all, src{s, len(set)})
	}
	c.mu.Unlock()
	slices.SortFunc(all, func(a, b src) int { return b.held - a.held })
	out := []string{}
	for _, s := range all[:min(n, len(all))] {
		out = append(out, fmt.Sprintf("%s (%d)", s.name, s.held))
	}
	return out
}

// Conn is a connection Conns admitted. Close gives its place back.
type Conn struct {
	net.Conn
	c      *Conns
	source string
	addr   ends
	last   atomic.Int64 // unix ns: the accept, then each call's start
	busy   atomic.Int32 // calls in flight
	authed atomic.Bool
	once   sync.Once
}

// Close gives the connection's place back (once) and closes it.
func (cn *Conn) Close() error {
	cn.once.Do(func() { cn.c.remove(cn) })
	return cn.Conn.Close()
}

// shut closes cn and reports whether this call gave its place back (not
// an earlier Close).
func (cn *Conn) shut() bool {
	first := false
	cn.once.Do(func() { first = true; cn.c.remove(cn) })
	_ = cn.Conn.Close()
	return first
}

// remove forgets cn.
func (c *Conns) remove(cn *Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open--
	c.dropPreAuth(cn)
	if c.byAddr[cn.addr] == cn {
		delete(c.byAddr, cn.addr)
	}
}

// dropPreAuth takes cn out of the pre-auth sets; c.mu is held.
func (c *Conns) dropPreAuth(cn *Conn) {
	delete(c.pre, cn)
	if set := c.bySrc[cn.source]; set != nil {
		delete(set, cn)
		if len(set) == 0 {
			delete(c.bySrc, cn.source)
		}
	}
}

// evictsBefore reports whether cn goes before o when one must be
// evicted.
func (cn *Conn) evictsBefore(o *Conn) bool {
	if a, b := cn.busy.Load() > 0, o.busy.Load() > 0; a != b {
		return b
	}
	return cn.last.Load() < o.last.Load()
}

// authenticate moves cn out of the pre-auth pool, for good. Nil-safe.
func (cn *Conn) authenticate() {
	if cn == nil || cn.authed.Load() || !cn.authed.CompareAndSwap(false, true) {
		return
	}
	cn.c.mu.Lock()
	defer cn.c.mu.Unlock()
	cn.c.dropPreAuth(cn)
}

// authenticated reports whether cn is authenticated; false for nil.
func (cn *Conn) authenticated() bool { return cn != nil && cn.authed.Load() }

// beginCall counts a call starting on cn (not nil); endCall, once for
// each, counts it ended.
func (cn *Conn) beginCall() {
	cn.last.Store(cn.c.now().UnixNano())
	cn.busy.Add(1)
}

func (cn *Conn) endCall() { cn.busy.Add(-1) }

// connKey carries a call's *Conn in its context.
type connKey struct{}

// connOf returns ctx's connection, or nil.
func connOf(ctx context.Context) *Conn {
	cn, _ := ctx.Value(connKey{}).(*Conn)
	return cn
}

// withConn returns ctx carrying cn.
func withConn(ctx context.Context, cn *Conn) context.Context {
	return context.WithValue(ctx, connKey{}, cn)
}

// Authenticate marks the connection a call's ctx came on as
// authenticated (the caller showed a known token). A context that came
// on no connection of a Conns is left alone.
func Authenticate(ctx context.Context) { connOf(ctx).authenticate() }

// ConnContext is an http.Server's ConnContext: it puts nc's *Conn (from
// Listen, under TLS too) in the connection's context, where Track and
// Authenticate find it.
func (c *Conns) ConnContext(ctx context.Context, nc net.Conn) context.Context {
	for {
		if cn, ok := nc.(*Conn); ok && cn.c == c {
			return withConn(ctx, cn)
		}
		inner, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return ctx
		}
		nc = inner.NetConn()
	}
}
