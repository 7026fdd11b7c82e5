package daemon

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// otherSource is the loopback address the attacks of this file come
// from: another source than the workers' 127.0.0.1.
const otherSource = "127.0.0.2"

// raiseFileLimit raises the process's soft limit on open files to its
// hard limit and returns it: the attacks hold thousands of connections,
// both ends of each in this process.
func raiseFileLimit(t *testing.T) int {
	t.Helper()
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Fatal(err)
	}
	if r.Cur < r.Max {
		r.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
			t.Fatal(err)
		}
	}
	return int(min(r.Cur, 1<<20))
}

// holdUnauthenticated opens n connections from otherSource, spread over
// addrs, each sending what a client without a token sends first (an
// HTTP/2 preface on the gRPC listener, a GET on the HTTP ones), and
// holds them until the test ends. It returns the last one opened to
// each address.
func holdUnauthenticated(t *testing.T, n int, grpcAddr string, httpAddrs ...string) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(otherSource)}}
	addrs := append([]string{grpcAddr}, httpAddrs...)
	conns := make([]net.Conn, n)
	open := func(i int) error {
		k := i % len(addrs)
		c, err := d.Dial("tcp", addrs[k])
		if err != nil {
			return fmt.Errorf("attack connection %d: %w", i, err)
		}
		conns[i] = c
		first := "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"
		switch k {
		case 1:
			first = "GET /ui/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
		case 2:
			first = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
		}
		_, _ = c.Write([]byte(first)) // a connection closed already is the cap at work
		return nil
	}
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	})
	// All but the last few in parallel; those last, one after another,
	// so that they are the latest the daemon accepted.
	tail := min(len(addrs), n)
	const dialers = 8
	errs := make(chan error, dialers)
	for w := range dialers {
		go func() {
			for i := w; i < n-tail; i += dialers {
				if err := open(i); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range dialers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	last := make([]net.Conn, len(addrs))
	for i := n - tail; i < n; i++ {
		if err := open(i); err != nil {
			t.Fatal(err)
		}
		last[i%len(addrs)] = conns[i]
	}
	return last
}

// stillOpen reports whether the daemon still holds c: a read finds no
// end of stream (it may find what the daemon answered).
func stillOpen(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err := io.Copy(io.Discard, c)
	return isTimeout(err)
}

// TestSecurityUnauthenticatedConnectionsCannotFillTheCap (N1): while one
// other source holds 1,024 connections that never authenticate (an
// HTTP/2 preface, a GET /ui/ or a GET /metrics each), four times a
// --max-conns of 256, a worker dialling afresh with its token gets its
// Allow, and /healthz and /metrics answer: with the per-source cap on
// (the default), and with it off (a listener behind a balancer), where
// the attack fills the cap and each new connection evicts the
// longest-idle pre-auth one.
func TestSecurityUnauthenticatedConnectionsCannotFillTheCap(t *testing.T) {
	files := raiseFileLimit(t)
	const maxConns = 256
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"one source past its share", nil},
		{"behind a balancer, at the cap", []string{"--preauth-conns-per-source", "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Both ends of each connection are in this process, the
			// daemon's held up to --max-conns.
			attack := 4 * maxConns
			if need := attack + maxConns + 1024; files < need {
				attack = (files - maxConns - 1024) / 2
				t.Logf("file limit %d: %d attack connections, not %d", files, attack, 4*maxConns)
			}
			httpAddr, metricsAddr := testredis.FreeAddr(t), testredis.FreeAddr(t)
			// Thousands of connections on a -race build slow every decision
			// past the default bound: a decision timeout only a stall
			// reaches keeps this test about connections, not Redis.
			args := append([]string{"--tokens", secTokens(t), "--http-listen", httpAddr, "--metrics-listen", metricsAddr,
				"--redis-decision-timeout", store.LaxDecisionTimeout.String(), "--max-conns", strconv.Itoa(maxConns)}, tc.args...)
			addr, _ := runSecured(t, args...)
			t0 := time.Now()
			last := holdUnauthenticated(t, attack, addr, httpAddr, metricsAddr)
			t.Logf("attack took %s", time.Since(t0))

			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			api := pb.NewBreakerServiceClient(dialRaw(t, addr, daemontest.WorkerToken))
			res, err := api.Allow(ctx, &pb.AllowRequest{Breaker: "n1", WorkerId: "w1"})
			if err != nil || res.GetDecision() != pb.Decision_DECISION_ALLOWED {
				t.Fatalf("a worker's Allow, dialled fresh during the attack: %v, %v; want allowed", res, err)
			}
			t.Logf("%d unauthenticated connections held: a fresh worker's Allow answered in %s", attack, time.Since(start))
			fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			for _, u := range []string{"http://" + httpAddr + "/healthz", "http://" + metricsAddr + "/metrics"} {
				r, err := fresh.Get(u)
				if err != nil {
					t.Fatalf("GET %s during the attack: %v", u, err)
				}
				_ = r.Body.Close()
				if r.StatusCode != http.StatusOK {
					t.Errorf("GET %s during the attack: %d, want 200", u, r.StatusCode)
				}
			}
			// The attack is held, not refused: one of its latest
			// connections (one a listener) is open still. Which one a busy
			// host leaves open depends on when each was last idle.
			held := 0
			for _, c := range last {
				if stillOpen(c) {
					held++
				}
			}
			if held == 0 {
				t.Error("none of the attack's latest connections is open: the test did not hold the attack")
			}
		})
	}
}

// TestSecurityHealthWatchStreamsAreSharedPerSource (N10): one source
// holds at most --open-max-streams-per-source health Watch streams on
// connections without an authenticated call, so another source still
// gets its own; and such a stream ends, Unavailable, once it sent
// nothing for --preauth-idle, while one on a connection that made an
// authenticated call lives on.
func TestSecurityHealthWatchStreamsAreSharedPerSource(t *testing.T) {
	t.Parallel()
	addr, _ := runSecured(t, "--tokens", secTokens(t), "--open-max-streams", "4", "--open-max-streams-per-source", "2", "--preauth-idle", "1s")
	watch := func(conn healthpb.HealthClient) (healthpb.Health_WatchClient, error) {
		s, err := conn.Watch(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			return nil, err
		}
		_, err = s.Recv()
		return s, err
	}
	attacker := healthpb.NewHealthClient(dialFrom(t, otherSource, addr))
	for i := range 2 {
		if _, err := watch(attacker); err != nil {
			t.Fatalf("health Watch %d of one source within its share: %v", i, err)
		}
	}
	if _, err := watch(attacker); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a third health Watch from one source past --open-max-streams-per-source 2: %v, want ResourceExhausted", err)
	}
	// The worker's connection made an authenticated call first: its
	// Watch is outside the share and lives past --preauth-idle.
	wconn := dialRaw(t, addr, daemontest.WorkerToken)
	if _, err := pb.NewBreakerServiceClient(wconn).Allow(context.Background(), &pb.AllowRequest{Breaker: "n10", WorkerId: "w1"}); err != nil {
		t.Fatal(err)
	}
	kept, err := watch(healthpb.NewHealthClient(wconn))
	if err != nil {
		t.Fatalf("a worker's health Watch while another source holds its share: %v", err)
	}
	keptEnded := make(chan error, 1)
	go func() { _, err := kept.Recv(); keptEnded <- err }()
	// A pre-auth connection from 127.0.0.1 kept busy with unary checks,
	// so that only the stream's own idle life can end its Watch.
	plain := healthpb.NewHealthClient(dialRaw(t, addr, ""))
	idle, err := watch(plain)
	if err != nil {
		t.Fatalf("a health Watch from another source: %v", err)
	}
	ended := make(chan error, 1)
	go func() { _, err := idle.Recv(); ended <- err }()
	daemontest.Eventually(t, "the idle health Watch on a pre-auth connection ended", func() bool {
		select {
		case err = <-ended:
			return true
		default:
		}
		if _, err := plain.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("a unary health Check: %v", err)
		}
		return false
	})
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "sent nothing") {
		t.Fatalf("an idle health Watch on a pre-auth connection ended with %v; want Unavailable naming its idle life", err)
	}
	select {
	case err := <-keptEnded:
		t.Errorf("the health Watch on an authenticated connection ended: %v", err)
	default:
	}
}

// TestSecurityRebindingPageCannotCallALoopbackDaemon (N3): a tokenless
// daemon on loopback answers only requests naming it (an IP address,
// localhost, --http-allowed-hosts): a page whose name was rebound to
// 127.0.0.1 is refused 421, with JSON naming its Host, before it can
// force a breaker or read the event stream; a cross-site POST naming the
// daemon is refused 403; the same calls naming the daemon are served.
func TestSecurityRebindingPageCannotCallALoopbackDaemon(t *testing.T) {
	httpAddr := testredis.FreeAddr(t)
	addr, _ := runSecured(t, "--http-listen", httpAddr, "--http-allowed-hosts", "breakerd.internal")
	call := func(method, path, host string, h map[string]string) (int, string) {
		t.Helper()
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"breaker":"n3","mode":"FORCE_MODE_OPEN","operator":"page","reason":"rebound"}`)
		}
		req, err := http.NewRequest(method, "http://"+httpAddr+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode < 300 { // a served event stream does not end
			return res.StatusCode, ""
		}
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return res.StatusCode, string(b)
	}
	const force = "/breakerd.v1.BreakerService/Force"
	for _, path := range []string{force, "/v1/watch"} {
		method := http.MethodGet
		if path == force {
			method = http.MethodPost
		}
		code, body := call(method, path, "evil.example:"+portOf(httpAddr), nil)
		if code != http.StatusMisdirectedRequest || !strings.Contains(body, `evil.example`) || !strings.Contains(body, `"field":"Host"`) {
			t.Errorf("%s %s with Host evil.example = %d %s; want 421 naming the Host", method, path, code, body)
		}
	}
	code, body := call(http.MethodPost, force, httpAddr, map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"})
	if code != http.StatusForbidden || !strings.Contains(body, "evil.example") {
		t.Errorf("a cross-site POST naming the daemon = %d %s; want 403 naming the Origin", code, body)
	}
	got, err := pb.NewBreakerServiceClient(dialRaw(t, addr, "")).Get(context.Background(), &pb.GetRequest{Breaker: "n3"})
	if err != nil || got.GetState().GetState() == pb.State_STATE_FORCED_OPEN {
		t.Fatalf("breaker n3 after the refused calls: %v, %v; want it not forced", got, err)
	}
	for _, host := range []string{httpAddr, "localhost:" + portOf(httpAddr), "breakerd.internal:" + portOf(httpAddr), "BREAKERD.INTERNAL."} {
		if code, body := call(http.MethodGet, "/healthz", host, nil); code != http.StatusOK {
			t.Errorf("GET /healthz with Host %s = %d %s; want 200", host, code, body)
		}
	}
	if code, body := call(http.MethodPost, force, httpAddr, nil); code != http.StatusOK {
		t.Errorf("POST Force naming the daemon, same origin = %d %s; want 200", code, body)
	}
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// TestSecurityHostCheckGuardsBrowserReachableListeners (N3): the Host
// and Origin checks are on for a loopback HTTP listener and for any
// listener without tokens, and off for a tokened one on another address
// (behind a Service or a balancer, whose Host is the balancer's name).
func TestSecurityHostCheckGuardsBrowserReachableListeners(t *testing.T) {
	for _, tc := range []struct {
		listen, tokens string
		on             bool
	}{
		{"127.0.0.1:7071", "", true},
		{"127.0.0.1:7071", "tokens.yaml", true},
		{"localhost:7071", "tokens.yaml", true},
		{"0.0.0.0:7071", "", true},
		{"0.0.0.0:7071", "tokens.yaml", false},
		{"10.0.0.5:7071", "tokens.yaml", false},
	} {
		got := httpHosts(Config{HTTPListen: tc.listen, TokensFile: tc.tokens}) != nil
		if got != tc.on {
			t.Errorf("--http-listen %s, --tokens %q: host check %v, want %v", tc.listen, tc.tokens, got, tc.on)
		}
	}
}

// dialFrom returns a connection to addr from the loopback address from
// (no token).
func dialFrom(t *testing.T, from, addr string) *grpc.ClientConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestSecurityTokenlessCallsAuthenticateTheirConnection (N1): without
// --tokens a call to the API that succeeds authenticates its connection
// (gRPC and HTTP alike), so at --max-conns a new connection evicts a
// connection that only fetched the status page, never theirs; the
// status page and health calls authenticate nothing.
func TestSecurityTokenlessCallsAuthenticateTheirConnection(t *testing.T) {
	httpAddr := testredis.FreeAddr(t)
	addr, _ := runSecured(t, "--http-listen", httpAddr, "--max-conns", "3", "--preauth-conns-per-source", "0")
	var dials atomic.Int32 // the gRPC worker's connections
	worker, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	api := pb.NewBreakerServiceClient(worker)
	if _, err := api.Allow(context.Background(), &pb.AllowRequest{Breaker: "n1t", WorkerId: "w1"}); err != nil {
		t.Fatal(err)
	}
	httpWorker, err := net.Dial("tcp", httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer httpWorker.Close()
	br := bufio.NewReader(httpWorker)
	allow := func() (int, error) {
		const body = `{"breaker":"n1t","worker_id":"w1"}`
		_, err := fmt.Fprintf(httpWorker, "POST /breakerd.v1.BreakerService/Allow HTTP/1.1\r\nHost: %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", httpAddr, len(body), body)
		if err != nil {
			return 0, err
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		return res.StatusCode, res.Body.Close()
	}
	if code, err := allow(); err != nil || code != http.StatusOK {
		t.Fatalf("an Allow over HTTP: %d, %v", code, err)
	}
	page, err := net.Dial("tcp", httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer page.Close()
	if _, err := page.Write([]byte("GET /ui/ HTTP/1.1\r\nHost: " + httpAddr + "\r\n\r\nGET /healthz HTTP/1.1\r\nHost: " + httpAddr + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	pr := bufio.NewReader(page)
	for range 2 {
		res, err := http.ReadResponse(pr, nil)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("the status page and /healthz: %v, %v", res, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
	}
	// At the cap of 3: the next connection evicts the page's.
	if closedByDaemon(t, addr) {
		t.Fatal("a connection at the cap with the page's pre-auth connection held: closed, want it served")
	}
	_ = page.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.Copy(io.Discard, pr); err != nil {
		t.Errorf("the page's connection: %v, want it closed by the daemon", err)
	}
	if _, err := api.Allow(context.Background(), &pb.AllowRequest{Breaker: "n1t", WorkerId: "w1"}); err != nil || dials.Load() != 1 {
		t.Errorf("the gRPC worker after the eviction: %v, %d connections dialled; want its one connection kept", err, dials.Load())
	}
	if code, err := allow(); err != nil || code != http.StatusOK {
		t.Errorf("the HTTP worker's connection after the eviction: %d, %v; want it kept", code, err)
	}
}
