package limits

import (
	"sync"
	"time"
)

// Listener is every limit a breakerd listener applies to its callers, in
// one place, each with its default and why. A zero field means its
// default (WithDefaults); the daemon fills it from its flags. Every
// listener the daemon serves passes through these limits: gRPC through
// GRPCOptions, WrapService and OpenStreamCap, HTTP through HTTPServer and
// HTTPHandler, and both through one Conns (Listen).
type Listener struct {
	// MaxHeaderBytes bounds one call's header list (gRPC metadata, HTTP
	// headers), counted as HTTP/2 counts it (name + value + 32 per
	// field). Past it the call is refused as its headers are read, before
	// any token check. Default 16 KiB: sixteen times what a breakerd call
	// sends (a bearer token and gRPC's own headers take under 1 KiB), and
	// under Envoy's 60 KiB; grpc-go's own default is 16 MiB.
	MaxHeaderBytes int
	// MaxRecvBytes bounds one request message (gRPC) or body (HTTP), in
	// bytes. Default 512 KiB: a BatchGet of 1,024 names of 256 bytes fits
	// twice.
	MaxRecvBytes int
	// MaxConns caps the connections the daemon holds open at once, over
	// its API listeners (gRPC, HTTP). At it a new connection evicts the
	// longest-idle pre-auth connection (one that has made no
	// authenticated call, see Conns), and is closed as it is accepted
	// only when every connection held has authenticated. Default 4096. It
	// is lowered further to the process's file limit (RLIMIT_NOFILE) less
	// FDReserve.
	MaxConns int
	// PreAuthIdle is how long a pre-auth connection lives without
	// starting a call; it is closed then, and so is a stream that needs
	// no token (a health Watch) that has sent nothing for as long on a
	// connection still pre-auth. Default 30s: every client makes its
	// first authenticated call as it connects, and a worker's idle
	// connection, authenticated, is bound by IdleTimeout instead.
	PreAuthIdle time.Duration
	// PreAuthPerSource caps the pre-auth connections from one source (an
	// IPv4 address, an IPv6 /64); at it a new connection from that source
	// evicts that source's longest-idle pre-auth connection, so one
	// source churns only its own. Default 64. Negative: none, for
	// listeners behind a proxy, NAT or L4 balancer, where every worker
	// shares an address.
	PreAuthPerSource int
	// FDReserve is how many file descriptors MaxConns leaves free for the
	// daemon itself: Redis connections (go-redis's pool, 10 per CPU by
	// default), reloads of the policy, tokens and hooks files, webhook
	// deliveries. So a flood of connections never makes a SIGHUP reload
	// (say, one revoking a token) fail with "too many open files".
	// Default 256; negative: none.
	FDReserve int
	// IdleTimeout closes a connection with no call open for this long
	// (gRPC: GOAWAY, then close within 5s; HTTP: the keep-alive idle
	// timeout). A held Watch stream keeps its connection. Default 5m:
	// a worker's client reconnects on its next call, at the cost of one
	// handshake.
	IdleTimeout time.Duration
	// HandshakeTimeout bounds a new connection's TLS and HTTP/2 handshake
	// (gRPC), or the reading of a request's headers (HTTP): a connection
	// that sends nothing is closed after it. Default 10s.
	HandshakeTimeout time.Duration
	// MaxConcurrentStreams bounds the calls one connection may have open
	// at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); more wait for a
	// slot. Default 256.
	MaxConcurrentStreams int
	// KeepaliveMinTime is the shortest interval between a client's
	// keepalive pings the daemon accepts; a client pinging faster is sent
	// GOAWAY (too_many_pings). Default 10s.
	KeepaliveMinTime time.Duration
	// OpenStreams caps the streams open at once, over the whole daemon, to
	// the services that need no token (grpc.health.v1 Watch, server
	// reflection); past it such a stream is ResourceExhausted. Unary
	// health checks are not counted. Default 100: load balancers that
	// watch health hold one stream per daemon each.
	OpenStreams int
	// OpenStreamsPerSource caps the OpenStreams one source (as
	// PreAuthPerSource counts them) holds on connections that have made no
	// authenticated call. Default 10; negative: none (behind a balancer).
	OpenStreamsPerSource int
	// ReadsPerToken caps the read calls (Get, BatchGet, List, Events) one
	// token has in flight at once on this daemon; past it a read is
	// ResourceExhausted before its request is decoded. Without tokens each
	// connection counts as a token. Default 16; negative: no cap.
	ReadsPerToken int
	// WatchesPerToken caps the Watch streams one token holds at once on
	// this daemon, checked before the request is decoded; without tokens
	// each connection counts as a token. Default 32; negative: no cap.
	WatchesPerToken int
	// ListMaxUnpaged is the most breakers a List with page_size 0
	// answers; past it the List is ResourceExhausted (never cut short),
	// and the caller pages. Default 10,000 (about 1 MB of answer).
	ListMaxUnpaged int
}

// The defaults of Listener, one constant each (see the field for why).
const (
	DefaultMaxHeaderBytes       = 16 << 10
	DefaultMaxRecvBytes         = 512 << 10
	DefaultMaxConns             = 4096
	DefaultPreAuthIdle          = 30 * time.Second
	DefaultPreAuthPerSource     = 64
	DefaultOpenStreamsPerSource = 10
	DefaultFDReserve            = 256
	DefaultIdleTimeout          = 5 * time.Minute
	DefaultHandshakeTimeout     = 10 * time.Second
	DefaultMaxConcurrentStreams = 256
	DefaultKeepaliveMinTime     = 10 * time.Second
	DefaultOpenStreams          = 100
	DefaultReadsPerToken        = 16
	DefaultWatchesPerToken      = 32
	DefaultListMaxUnpaged       = 10_000
)

// WithDefaults returns l with every zero field at its default.
func (l Listener) WithDefaults() Listener {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxHeaderBytes, DefaultMaxHeaderBytes)
	def(&l.MaxRecvBytes, DefaultMaxRecvBytes)
	def(&l.MaxConns, DefaultMaxConns)
	defDur(&l.PreAuthIdle, DefaultPreAuthIdle)
	def(&l.PreAuthPerSource, DefaultPreAuthPerSource)
	def(&l.OpenStreamsPerSource, DefaultOpenStreamsPerSource)
	def(&l.FDReserve, DefaultFDReserve)
	defDur(&l.IdleTimeout, DefaultIdleTimeout)
	defDur(&l.HandshakeTimeout, DefaultHandshakeTimeout)
	def(&l.MaxConcurrentStreams, DefaultMaxConcurrentStreams)
	defDur(&l.KeepaliveMinTime, DefaultKeepaliveMinTime)
	def(&l.OpenStreams, DefaultOpenStreams)
	def(&l.ReadsPerToken, DefaultReadsPerToken)
	def(&l.WatchesPerToken, DefaultWatchesPerToken)
	def(&l.ListMaxUnpaged, DefaultListMaxUnpaged)
	return l
}

// PerKey caps the calls in flight per key (a token's name). It is safe
// for concurrent use.
type PerKey struct {
	limit int
	mu    sync.Mutex
	held  map[string]int
}

// NewPerKey returns a cap of limit calls per key; limit < 1 caps nothing.
func NewPerKey(limit int) *PerKey { return &PerKey{limit: limit, held: map[string]int{}} }

// Limit is the cap per key (< 1: none).
func (p *PerKey) Limit() int { return p.limit }

// Acquire takes a slot for key and returns the function that gives it
// back (call it once), or false when key holds all its slots.
func (p *PerKey) Acquire(key string) (release func(), ok bool) {
	if p.limit < 1 {
		return func() {}, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held[key] >= p.limit {
		return nil, false
	}
	p.held[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.held[key]--; p.held[key] == 0 {
				delete(p.held, key)
			}
		})
	}, true
}

// Held is how many slots key holds now.
func (p *PerKey) Held(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held[key]
}
