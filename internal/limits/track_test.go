package limits

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// echoDesc is a service with a unary method that answers (OK), one that
// fails (Fail) and a stream that sends one message and waits (Send):
// calls that need a token, beside the health service's open ones.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "OK", Handler: echoHandler(nil)},
		{MethodName: "Fail", Handler: echoHandler(status.Error(codes.InvalidArgument, "no"))},
	},
	Streams: []grpc.StreamDesc{{StreamName: "Send", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
		if err := ss.SendMsg(&healthpb.HealthCheckResponse{}); err != nil {
			return err
		}
		<-ss.Context().Done()
		return nil
	}}},
}

// echoHandler answers err, or an empty response when err is nil.
func echoHandler(err error) grpc.MethodHandler {
	return func(_ any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
		req := &healthpb.HealthCheckRequest{}
		if derr := dec(req); derr != nil {
			return nil, derr
		}
		h := func(context.Context, any) (any, error) { return &healthpb.HealthCheckResponse{}, err }
		if in == nil {
			return h(ctx, req)
		}
		return in(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/test.Echo/"}, h)
	}
}

// TestCallsAuthenticateTheirConnection: on a gRPC server whose calls
// Calls reports, a connection stays pre-auth through calls to an open
// method and failed calls, and is authenticated by a call answered
// without an error, by a message sent on a stream, or at once by a call
// whose context identifies a known token, even one that fails; each call
// starts its connection's idle clock again.
func TestCallsAuthenticateTheirConnection(t *testing.T) {
	p := newPool(t, Listener{MaxConns: 10, FDReserve: -1, PreAuthIdle: time.Minute})
	// The "token" metadata stands for a token the tap found.
	identified := func(ctx context.Context) bool {
		md, _ := metadata.FromIncomingContext(ctx)
		return len(md.Get("token")) > 0
	}
	open := func(m string) bool { return m == "/grpc.health.v1.Health/Check" }
	calls := p.c.Calls(identified, open)
	g := grpc.NewServer(calls.ServerOption())
	reg := calls.Registrar(g)
	reg.RegisterService(&echoDesc, nil)
	healthpb.RegisterHealthServer(reg, health.NewServer())
	lis := &chanListener{conns: p.conns, addr: p.addr, done: make(chan struct{})}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)

	dial := func() *grpc.ClientConn {
		t.Helper()
		cc, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	preAuth := func() int { return p.c.Stats().PreAuth }
	ctx := context.Background()
	resp := &healthpb.HealthCheckResponse{}

	// Open and failed calls: still pre-auth, the idle clock started again.
	cc := dial()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	p.advance(time.Hour)
	if err := cc.Invoke(ctx, "/test.Echo/Fail", &healthpb.HealthCheckRequest{}, resp); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Fail = %v, want InvalidArgument", err)
	}
	if got := preAuth(); got != 1 {
		t.Fatalf("after an open call and a failed one: %d pre-auth, want 1", got)
	}
	if n := p.c.Sweep(); n != 0 {
		t.Errorf("Sweep after a call: closed %d, want 0 (the call started the idle clock again)", n)
	}

	// A call answered without an error authenticates.
	if err := cc.Invoke(ctx, "/test.Echo/OK", &healthpb.HealthCheckRequest{}, resp); err != nil {
		t.Fatal(err)
	}
	if got := preAuth(); got != 0 {
		t.Errorf("after a call answered: %d pre-auth, want 0", got)
	}

	// A known token authenticates even a call that fails.
	cc2 := dial()
	tctx := metadata.AppendToOutgoingContext(ctx, "token", "t")
	if err := cc2.Invoke(tctx, "/test.Echo/Fail", &healthpb.HealthCheckRequest{}, resp); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Fail = %v, want InvalidArgument", err)
	}
	if got := preAuth(); got != 0 {
		t.Errorf("after a failed call with a token: %d pre-auth, want 0", got)
	}

	// A message sent on a stream authenticates while the stream is open.
	cc3 := dial()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := cc3.NewStream(sctx, &echoDesc.Streams[0], "/test.Echo/Send")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(&healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := st.RecvMsg(resp); err != nil {
		t.Fatal(err)
	}
	// The server authenticates once its send returns, which may be just
	// after the message arrived here.
	for deadline := time.Now().Add(10 * time.Second); preAuth() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after a stream sent a message: %d pre-auth, want 0", preAuth())
		}
	}
}

// chanListener hands a gRPC server the connections a pool accepted.
type chanListener struct {
	conns chan net.Conn
	addr  string
	done  chan struct{}
	once  sync.Once
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr {
	a, _ := net.ResolveTCPAddr("tcp", l.addr)
	return a
}
