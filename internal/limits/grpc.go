package limits

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// GRPCOptions returns the server options that apply l to a gRPC server as
// its transport reads: the header list bound (refused before any tap or
// interceptor runs, so before the token check), the message bound, the
// streams per connection, the handshake and idle timeouts, and the
// keepalive policy. Serve it on a listener from Conns.Listen.
func (l Listener) GRPCOptions() []grpc.ServerOption {
	l = l.WithDefaults()
	return []grpc.ServerOption{
		grpc.MaxHeaderListSize(uint32(l.MaxHeaderBytes)),
		grpc.MaxRecvMsgSize(l.MaxRecvBytes),
		grpc.MaxConcurrentStreams(uint32(l.MaxConcurrentStreams)),
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             l.KeepaliveMinTime,
			PermitWithoutStream: true,
		}),
		// MaxConnectionIdle closes the idle; Time and Timeout find peers
		// that vanished (a Watch stream held by a dead worker): ping after
		// a minute of silence, drop after 20s more.
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: l.IdleTimeout,
			Time: time.Minute, Timeout: 20 * time.Second}),
	}
}

// OpenStreamCap returns a stream interceptor for the methods open
// reports as needing no token (health Watch, reflection). It caps their
// streams open at once over the whole server at l.OpenStreams, and, on
// connections that have made no authenticated call (Conns), at
// l.OpenStreamsPerSource per source; past either a stream is
// ResourceExhausted. Such a stream on a connection still pre-auth ends,
// Unavailable, once it has sent nothing for l.PreAuthIdle, so no client
// holds the cap for long.
func (l Listener) OpenStreamCap(open func(method string) bool) grpc.StreamServerInterceptor {
	l = l.WithDefaults()
	n := l.OpenStreams
	slots := make(chan struct{}, n)
	share := NewPerKey(l.OpenStreamsPerSource)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if !open(info.FullMethod) {
			return h(srv, ss)
		}
		cn := connOf(ss.Context())
		if !cn.authenticated() {
			src := sourceOf(ss.Context())
			release, ok := share.Acquire(src)
			if !ok {
				return status.Errorf(codes.ResourceExhausted,
					"limits: %s holds %d streams that need no token (health Watch, reflection) on connections without an authenticated call, its share; use the unary health Check", src, share.Limit())
			}
			defer release()
		}
		select {
		case slots <- struct{}{}:
		default:
			return status.Errorf(codes.ResourceExhausted,
				"limits: %d streams that need no token (health Watch, reflection) are open on this daemon, its cap; use the unary health Check", n)
		}
		defer func() { <-slots }()
		return endWhenIdle(srv, ss, h, cn, l.PreAuthIdle)
	}
}

// sourceOf names the source of ctx's call (Source).
func sourceOf(ctx context.Context) string {
	if cn := connOf(ctx); cn != nil {
		return cn.source
	}
	if p, ok := peer.FromContext(ctx); ok {
		return Source(p.Addr)
	}
	return "unknown"
}

// errIdleStream ends a stream endWhenIdle found idle.
var errIdleStream = errors.New("limits: idle stream")

// endWhenIdle runs h on ss, ending it once it has sent nothing for idle
// while cn has made no authenticated call.
func endWhenIdle(srv any, ss grpc.ServerStream, h grpc.StreamHandler, cn *Conn, idle time.Duration) error {
	ctx, cancel := context.WithCancelCause(ss.Context())
	defer cancel(nil)
	s := &sentStream{ServerStream: ss, ctx: ctx}
	s.last.Store(time.Now().UnixNano())
	go func() {
		t := time.NewTimer(idle)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if cn.authenticated() {
				return
			}
			if left := time.Duration(s.last.Load() + int64(idle) - time.Now().UnixNano()); left > 0 {
				t.Reset(left)
				continue
			}
			cancel(errIdleStream)
			return
		}
	}()
	err := h(srv, s)
	if errors.Is(context.Cause(ctx), errIdleStream) {
		return status.Errorf(codes.Unavailable,
			"limits: this stream needs no token and sent nothing for %s on a connection without an authenticated call; open it again", idle)
	}
	return err
}

// sentStream notes when its stream last sent a message.
type sentStream struct {
	grpc.ServerStream
	ctx  context.Context
	last atomic.Int64 // unix ns
}

func (s *sentStream) Context() context.Context { return s.ctx }

func (s *sentStream) SendMsg(m any) error {
	s.last.Store(time.Now().UnixNano())
	return s.ServerStream.SendMsg(m)
}

// Gate is a per-token cap on some methods of a service, applied by
// WrapService before their requests are decoded.
type Gate struct {
	// Methods are the method names it covers ("List", "Watch").
	Methods []string
	// Cap counts the calls in flight per key.
	Cap *PerKey
	// What names the calls in the refusal ("read calls").
	What string
}

// WrapService returns a copy of sd whose methods covered by gates take a
// slot of their gate, under key(ctx) (the caller: `token "pool-a"`, say),
// before the request is decoded, and give it back when the call ends.
// Past the cap the call is ResourceExhausted and its request never
// decoded. Register the copy in place of sd. For a unary method key sees
// what the server's tap handle put in the context; for a stream, what the
// interceptors did.
func WrapService(sd *grpc.ServiceDesc, key func(context.Context) string, gates ...Gate) *grpc.ServiceDesc {
	gateOf := map[string]Gate{}
	for _, g := range gates {
		for _, m := range g.Methods {
			gateOf[m] = g
		}
	}
	out := *sd
	out.Methods = append([]grpc.MethodDesc(nil), sd.Methods...)
	out.Streams = append([]grpc.StreamDesc(nil), sd.Streams...)
	for i, m := range out.Methods {
		g, ok := gateOf[m.MethodName]
		if !ok {
			continue
		}
		h := m.Handler
		out.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			release, err := g.acquire(key(ctx))
			if err != nil {
				return nil, err
			}
			defer release()
			return h(srv, ctx, dec, in)
		}
	}
	for i, s := range out.Streams {
		g, ok := gateOf[s.StreamName]
		if !ok {
			continue
		}
		h := s.Handler
		out.Streams[i].Handler = func(srv any, ss grpc.ServerStream) error {
			release, err := g.acquire(key(ss.Context()))
			if err != nil {
				return err
			}
			defer release()
			return h(srv, ss)
		}
	}
	return &out
}

// Acquire takes a slot for key, or returns ResourceExhausted; call the
// function it returns once, when the call ends. It counts a call that
// does not pass WrapService (an HTTP stream's snapshot) with the ones that
// do.
func (g Gate) Acquire(key string) (func(), error) { return g.acquire(key) }

// acquire takes a slot for key, or returns ResourceExhausted.
func (g Gate) acquire(key string) (func(), error) {
	release, ok := g.Cap.Acquire(key)
	if !ok {
		return nil, status.Errorf(codes.ResourceExhausted,
			"limits: %s has %d %s in flight on this daemon, its cap; retry when one ends", key, g.Cap.Limit(), g.What)
	}
	return release, nil
}

// errMessage is a status error's message, without its code.
func errMessage(err error) string { return status.Convert(err).Message() }
