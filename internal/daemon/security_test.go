package daemon

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The tests of this file are named after the findings of the security
// review they hold fixed (docs/security.md, Threat model).

// secTokens writes a tokens file with an operator and a worker (w1):
// daemontest.WriteTokens's.
func secTokens(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "tokens.yaml")
	daemontest.WriteTokens(t, f, true)
	return f
}

// runDaemon runs the daemon on args (plus a free loopback --listen and,
// unless args set one, an embedded Redis) until the test ends, and
// returns its address and its log.
func runSecured(t *testing.T, args ...string) (string, *daemontest.Buffer) {
	t.Helper()
	// The lax decision bound first (args may set another): on a busy
	// machine a healthy Redis can take longer than the default's 300 ms.
	cfg, err := ParseConfig(append([]string{"--listen", "127.0.0.1:0", "--health-interval", daemontest.HealthInterval.String(),
		"--redis-decision-timeout", store.LaxDecisionTimeout.String()}, args...), func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	logs := &daemontest.Buffer{}
	return startRun(t, cfg, slog.New(slog.NewTextHandler(logs, nil)), logs), logs
}

// dialRaw returns a connection to addr that sends token, if any, with
// every call (over plaintext: the test's loopback).
func dialRaw(t *testing.T, addr, token string) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithUnaryInterceptor(func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, o ...grpc.CallOption) error {
			return inv(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), m, req, reply, cc, o...)
		}), grpc.WithStreamInterceptor(func(ctx context.Context, d *grpc.StreamDesc, cc *grpc.ClientConn, m string, s grpc.Streamer, o ...grpc.CallOption) (grpc.ClientStream, error) {
			return s(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), d, cc, m, o...)
		}))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestSecurityOversizedMetadataRefusedBeforeTheTokenCheck (H1): a call whose
// metadata passes --max-header-bytes is reset as its headers are read,
// never answered Unauthenticated (which would mean they were read in full
// and the token checked); the same call with small metadata is answered
// Unauthenticated, so the test sees both answers.
func TestSecurityOversizedMetadataRefusedBeforeTheTokenCheck(t *testing.T) {
	addr, _ := runSecured(t, "--tokens", secTokens(t), "--max-header-bytes", "8192")
	const list = "/breakerd.v1.BreakerService/List"
	small, err := daemontest.RawCall(addr, list, "", 1<<10, 20*time.Second)
	if err != nil || small.Reset || small.GRPCStatus != "16" {
		t.Fatalf("1 KiB of metadata, no token: %v, %v; want grpc-status 16 (Unauthenticated)", small, err)
	}
	for _, size := range []int{64 << 10, 1 << 20} {
		got, err := daemontest.RawCall(addr, list, "", size, 20*time.Second)
		if err != nil || !got.Reset {
			t.Errorf("%d bytes of metadata, no token: %v, %v; want the stream reset before the token check", size, got, err)
		}
		got, err = daemontest.RawCall(addr, list, daemontest.WorkerToken, size, 20*time.Second)
		if err != nil || !got.Reset {
			t.Errorf("%d bytes of metadata, a worker's token: %v, %v; want the stream reset", size, got, err)
		}
	}
}

// TestSecurityConnectionsPastTheCapAreRefusedWhenAllAuthenticated (H1,
// N1): with --max-conns 4 held by four workers that made an
// authenticated call, a fifth connection is closed as it is accepted,
// and once one of the four closes a new one is served; a connection that
// never authenticated gives its place to the next instead.
func TestSecurityConnectionsPastTheCapAreRefusedWhenAllAuthenticated(t *testing.T) {
	addr, _ := runSecured(t, "--tokens", secTokens(t), "--max-conns", "4")
	var workers []*grpc.ClientConn
	for range 3 {
		conn := dialRaw(t, addr, daemontest.WorkerToken)
		if _, err := pb.NewBreakerServiceClient(conn).Allow(context.Background(), &pb.AllowRequest{Breaker: "h1", WorkerId: "w1"}); err != nil {
			t.Fatal(err)
		}
		workers = append(workers, conn)
	}
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// The fourth place is held by a connection without a call: the next
	// evicts it, and is served.
	if closedByDaemon(t, addr) {
		t.Fatal("a connection at the cap with one pre-auth connection held: closed, want it served in that one's place")
	}
	_ = raw.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.Copy(io.Discard, raw); err != nil {
		t.Fatalf("the evicted pre-auth connection: %v, want it closed by the daemon", err)
	}
	conn := dialRaw(t, addr, daemontest.WorkerToken)
	if _, err := pb.NewBreakerServiceClient(conn).Allow(context.Background(), &pb.AllowRequest{Breaker: "h1", WorkerId: "w1"}); err != nil {
		t.Fatal(err)
	}
	workers = append(workers, conn)
	// The fifth, with four authenticated held, is closed at accept.
	if !closedByDaemon(t, addr) {
		t.Fatal("a fifth connection past --max-conns 4, all four authenticated, was kept open")
	}
	_ = workers[0].Close()
	daemontest.Eventually(t, "a new connection served once one of the four closed", func() bool {
		return !closedByDaemon(t, addr)
	})
}

// closedByDaemon dials addr and reports whether the daemon closed the
// connection without a byte (a served one gets grpc's SETTINGS, or waits).
func closedByDaemon(t *testing.T, addr string) bool {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return true
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := c.Read(make([]byte, 64))
	return n == 0 && err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestSecurityIdleConnectionsAreClosed (H1): a connection that never
// handshakes is closed after --handshake-timeout, and one whose calls
// have ended after --idle-timeout (GOAWAY, then closed).
func TestSecurityIdleConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	addr, _ := runSecured(t, "--handshake-timeout", "200ms", "--idle-timeout", "300ms")
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	_ = silent.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.Copy(io.Discard, silent); err != nil {
		t.Errorf("a connection that never handshakes: %v, want it closed by the daemon", err)
	}

	conn := dialRaw(t, addr, "")
	hc := healthpb.NewHealthClient(conn)
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	// grpc's client goes IDLE when the daemon sends GOAWAY (max_idle).
	daemontest.Eventually(t, "the idle connection closed by the daemon", func() bool {
		return conn.GetState().String() == "IDLE"
	})
}

// TestSecurityUnauthenticatedStreamsStayAtTheCap (M1): health Watch streams (open
// without a token) stay at --open-max-streams: the next is
// ResourceExhausted, and one is admitted again once one ends.
func TestSecurityUnauthenticatedStreamsStayAtTheCap(t *testing.T) {
	addr, _ := runSecured(t, "--tokens", secTokens(t), "--open-max-streams", "3")
	hc := healthpb.NewHealthClient(dialRaw(t, addr, ""))
	var cancels []context.CancelFunc
	for i := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cancels = append(cancels, cancel)
		s, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatalf("health Watch %d within the cap: %v", i, err)
		}
	}
	over := func() error {
		s, err := hc.Watch(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	if err := over(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a fourth health Watch past --open-max-streams 3: %v, want ResourceExhausted", err)
	}
	cancels[0]()
	daemontest.Eventually(t, "a health Watch admitted once one ended", func() bool {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return false
		}
		_, err = s.Recv()
		return err == nil
	})
}

// TestSecurityWatchPastTheStreamCapRefusedBeforeDecoding (M4): past
// --watch-max-streams-per-token a Watch is ResourceExhausted before its
// request is read: a request that does not even decode gets
// ResourceExhausted, not the decoding error it gets within the cap.
func TestSecurityWatchPastTheStreamCapRefusedBeforeDecoding(t *testing.T) {
	addr, _ := runSecured(t, "--tokens", secTokens(t), "--watch-max-streams-per-token", "2")
	conn := dialRaw(t, addr, daemontest.WorkerToken)
	api := pb.NewBreakerServiceClient(conn)
	for range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := api.Watch(ctx, &pb.WatchRequest{Breakers: []string{"b"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Header(); err != nil {
			t.Fatal(err)
		}
	}
	if err := garbageWatch(conn); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("an undecodable Watch past the cap: %v, want ResourceExhausted before decoding", err)
	}
	// Another token's slots are its own: the same request decodes (and fails).
	if err := garbageWatch(dialRaw(t, addr, daemontest.OperatorToken)); status.Code(err) == codes.ResourceExhausted || err == nil {
		t.Errorf("an undecodable Watch of another token: %v, want a decoding error", err)
	}
}

// garbage is not a protobuf message (field 1, a length past the end).
var garbage = []byte{0x0a, 0xff, 0xff, 0xff, 0x0f}

// garbageWatch sends a Watch whose request does not decode and returns how
// it ended.
func garbageWatch(conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/breakerd.v1.BreakerService/Watch", grpc.ForceCodec(rawBytes{}))
	if err != nil {
		return err
	}
	b := garbage
	if err := s.SendMsg(&b); err != nil {
		return err
	}
	_ = s.CloseSend()
	var out []byte
	return s.RecvMsg(&out)
}

// rawBytes sends pre-encoded bytes as they are.
type rawBytes struct{}

func (rawBytes) Marshal(v any) ([]byte, error)   { return *v.(*[]byte), nil }
func (rawBytes) Unmarshal(b []byte, v any) error { *v.(*[]byte) = b; return nil }
func (rawBytes) Name() string                    { return "proto" }

// TestSecurityReadsPastATokensShareRefusedBeforeDecoding (M4): with Redis stalled,
// a token's reads pile up; past --reads-per-token the next is
// ResourceExhausted before its request is decoded (an undecodable List
// gets ResourceExhausted, where within the cap it gets a decoding error).
func TestSecurityReadsPastATokensShareRefusedBeforeDecoding(t *testing.T) {
	b := testredis.Mini(t)
	proxy := testredis.NewProxy(t, b.Addr)
	addr, _ := runSecured(t, "--tokens", secTokens(t), "--reads-per-token", "2", "--redis-outage", "unavailable",
		"--redis-url", "redis://"+proxy.Addr()+"?read_timeout=1m&write_timeout=1m")
	conn := dialRaw(t, addr, daemontest.WorkerToken)
	if err := garbageList(conn); status.Code(err) == codes.ResourceExhausted || err == nil {
		t.Fatalf("an undecodable List within the cap: %v, want a decoding error", err)
	}
	proxy.Stall()
	defer proxy.Restore(t)
	api := pb.NewBreakerServiceClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 2 {
		go func() { _, _ = api.Get(ctx, &pb.GetRequest{Breaker: "held"}) }()
	}
	daemontest.Eventually(t, "an undecodable List refused past the 2 held reads", func() bool {
		return status.Code(garbageList(conn)) == codes.ResourceExhausted
	})
	// Another token's reads are its own.
	if err := garbageList(dialRaw(t, addr, daemontest.OperatorToken)); status.Code(err) == codes.ResourceExhausted {
		t.Errorf("another token's List: %v, want its own slots", err)
	}
}

// garbageList sends a List whose request does not decode.
func garbageList(conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []byte
	b := garbage
	return conn.Invoke(ctx, "/breakerd.v1.BreakerService/List", &b, &out, grpc.ForceCodec(rawBytes{}))
}

// TestSecurityUnpagedListAnswersInFullOrNotAtAll (M4): a List without
// page_size answers every breaker up to --list-max-unpaged, and past it
// is ResourceExhausted, never cut short; pages still list them all.
func TestSecurityUnpagedListAnswersInFullOrNotAtAll(t *testing.T) {
	addr, _ := runSecured(t, "--tokens", secTokens(t), "--list-max-unpaged", "5")
	api := pb.NewBreakerServiceClient(dialRaw(t, addr, daemontest.OperatorToken))
	ctx := context.Background()
	force := func(name string) {
		t.Helper()
		if _, err := api.Force(ctx, &pb.ForceRequest{Breaker: name, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "drill"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		force(n)
	}
	res, err := api.List(ctx, &pb.ListRequest{})
	if err != nil || len(res.GetStates()) != 5 {
		t.Fatalf("List of 5 breakers at a cap of 5: %d states, %v; want all 5", len(res.GetStates()), err)
	}
	force("f")
	if res, err := api.List(ctx, &pb.ListRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("List of 6 breakers past a cap of 5: %d states, %v; want ResourceExhausted", len(res.GetStates()), err)
	}
	seen := map[string]bool{}
	req := &pb.ListRequest{PageSize: 2}
	for {
		res, err := api.List(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range res.GetStates() {
			seen[s.GetBreaker()] = true
		}
		if req.PageToken = res.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	if len(seen) != 6 {
		t.Errorf("paged List saw %d breakers, want 6", len(seen))
	}
}

// TestSecurityWatchEndsWhenItsTokenIsRevoked (L4): a Watch stream opened
// with a token ends Unauthenticated once a reload takes the token out,
// and another token's stream goes on.
func TestSecurityWatchEndsWhenItsTokenIsRevoked(t *testing.T) {
	tokens := secTokens(t)
	addr, logs := runSecured(t, "--tokens", tokens, "--config-poll", "50ms")
	watch := func(token string) pb.BreakerService_WatchClient {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t.Cleanup(cancel)
		s, err := pb.NewBreakerServiceClient(dialRaw(t, addr, token)).Watch(ctx, &pb.WatchRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Header(); err != nil {
			t.Fatal(err)
		}
		return s
	}
	revoked, kept := watch(daemontest.WorkerToken), watch(daemontest.OperatorToken)
	daemontest.WriteTokens(t, tokens, false)
	if err := nextEvent(revoked, nil); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("the revoked token's Watch after the reload: %v, want Unauthenticated; log:\n%s", err, logs)
	}
	if _, err := pb.NewBreakerServiceClient(dialRaw(t, addr, daemontest.OperatorToken)).Force(context.Background(),
		&pb.ForceRequest{Breaker: "x", Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "drill"}); err != nil {
		t.Fatal(err)
	}
	var e *pb.Event
	if err := nextEvent(kept, &e); err != nil || e.GetBreaker() != "x" {
		t.Errorf("the kept token's Watch: %v, %v; want the event of x", e, err)
	}
}

// nextEvent reads s past its heartbeats to the next event (stored in *e
// when e is not nil), or the stream's error.
func nextEvent(s pb.BreakerService_WatchClient, e **pb.Event) error {
	for {
		m, err := s.Recv()
		if err != nil {
			return err
		}
		if m.GetEvent() != nil {
			if e != nil {
				*e = m.GetEvent()
			}
			return nil
		}
	}
}

// TestSecurityHTTPListenerHoldsTheSameLimits (H1): the HTTP/JSON listener
// refuses headers past --max-header-bytes before the token check (431,
// where a small request without a token is 401), and its connections
// count against --max-conns with the gRPC listener's: with three that
// made a call with a token held, a fourth is closed at accept.
func TestSecurityHTTPListenerHoldsTheSameLimits(t *testing.T) {
	t.Parallel()
	httpAddr := testredis.FreeAddr(t)
	runSecured(t, "--tokens", secTokens(t), "--http-listen", httpAddr, "--max-header-bytes", "8192", "--max-conns", "3")
	post := func(pad string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+httpAddr+"/breakerd.v1.BreakerService/List", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Pad", pad)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		return res.StatusCode
	}
	if code := post(""); code != http.StatusUnauthorized {
		t.Fatalf("a small request without a token: %d, want 401", code)
	}
	if code := post(strings.Repeat("p", 16<<10)); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("16 KiB of headers without a token: %d, want 431 before the token check", code)
	}
	http.DefaultClient.CloseIdleConnections()
	for range 3 { // held open to the end: the cap's three places
		c, err := net.Dial("tcp", httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		call := "POST /breakerd.v1.BreakerService/List HTTP/1.1\r\nHost: " + httpAddr + "\r\nAuthorization: Bearer " + daemontest.WorkerToken +
			"\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
		if _, err := c.Write([]byte(call)); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("a List with a worker's token on a held connection: %v, %v", res, err)
		}
	}
	daemontest.Eventually(t, "a fourth connection (HTTP) closed at accept", func() bool { return closedByDaemon(t, httpAddr) })
}

// TestSecurityWatchSnapshotTakesATokensReadSlot (N2): a GET /v1/watch
// snapshot is a read of the token's: with Redis stalled, one stream's
// snapshot holds the token's one slot (--reads-per-token 1), so the
// token's next read is ResourceExhausted before it is decoded, and
// another token's reads are its own.
func TestSecurityWatchSnapshotTakesATokensReadSlot(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	proxy := testredis.NewProxy(t, b.Addr)
	httpAddr := testredis.FreeAddr(t)
	addr, _ := runSecured(t, "--tokens", secTokens(t), "--reads-per-token", "1", "--redis-outage", "unavailable",
		"--http-listen", httpAddr, "--redis-url", "redis://"+proxy.Addr()+"?read_timeout=1m&write_timeout=1m")
	conn := dialRaw(t, addr, daemontest.WorkerToken)
	if err := garbageList(conn); status.Code(err) == codes.ResourceExhausted || err == nil {
		t.Fatalf("an undecodable List within the cap: %v, want a decoding error", err)
	}
	proxy.Stall()
	defer proxy.Restore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/v1/watch", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+daemontest.WorkerToken)
	go func() {
		// The test's own Lists below take the slot for a moment: a stream
		// that asks for it then is refused (429) and asks again.
		for ctx.Err() == nil {
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusTooManyRequests {
				return
			}
		}
	}()
	daemontest.Eventually(t, "an undecodable List refused while the stream's snapshot holds the read slot", func() bool {
		return status.Code(garbageList(conn)) == codes.ResourceExhausted
	})
	if err := garbageList(dialRaw(t, addr, daemontest.OperatorToken)); status.Code(err) == codes.ResourceExhausted {
		t.Errorf("another token's List: %v, want its own slots", err)
	}
}
