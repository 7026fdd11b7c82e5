package auth_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/tests/testtls"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

const (
	aliceToken = "alice-operator-token-0123456789"
	poolToken  = "pool-a-worker-token-0123456789"
	w9Token    = "w9-worker-token-0123456789abcd"
)

func tokens(t *testing.T) *auth.Tokens {
	t.Helper()
	sum := sha256.Sum256([]byte(w9Token))
	tk, err := auth.Parse([]byte(`
tokens:
  - name: alice
    role: operator
    token: ` + aliceToken + `
  - name: pool-a
    role: worker
    token: ` + poolToken + `
    workers: ["pool-a-*", w1]
  - name: w9
    role: worker
    token_sha256: ` + hex.EncodeToString(sum[:]) + `
    workers: [w9]
`))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// start runs a daemon whose calls need tokens.
func start(t *testing.T, b *testredis.Backend, extra ...grpc.ServerOption) *daemontest.Daemon {
	t.Helper()
	return daemontest.StartWith(t, b, daemontest.Options{Server: append(auth.New(tokens(t)).ServerOptions(), extra...)})
}

func dial(t *testing.T, addr string, opts ...client.Option) pb.BreakerServiceClient {
	t.Helper()
	c, err := client.Dial(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.API()
}

func wantCode(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()
	s := status.Convert(err)
	if s.Code() != code || !strings.Contains(s.Message(), msg) {
		t.Errorf("%s: %v, want %v containing %q", what, err, code, msg)
	}
}

func TestTokensAndRoles(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b)
		ctx := context.Background()
		name := b.Breaker("web_search")
		none := dial(t, d.Addr)
		bogus := dial(t, d.Addr, client.WithToken("not-a-token-at-all-0123456789"))
		pool := dial(t, d.Addr, client.WithToken(poolToken))
		w9 := dial(t, d.Addr, client.WithToken(w9Token))
		alice := dial(t, d.Addr, client.WithToken(aliceToken))

		// No token, or an unknown one: Unauthenticated, and nothing served.
		_, err := none.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w1"})
		wantCode(t, "Allow without a token", err, codes.Unauthenticated, "authorization: missing")
		_, err = bogus.Get(ctx, &pb.GetRequest{Breaker: name})
		wantCode(t, "Get with an unknown token", err, codes.Unauthenticated, "unknown bearer token")
		w, err := none.Watch(ctx, &pb.WatchRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		wantCode(t, "Watch without a token", err, codes.Unauthenticated, "authorization")
		if _, err := (&rawBearer{conn: d.Addr}).allow(t, "Basic "+poolToken, name); status.Code(err) != codes.Unauthenticated {
			t.Errorf("a Basic authorization: %v, want Unauthenticated", err)
		}

		// A worker token: Allow, Record and reads as its own ids.
		for _, id := range []string{"w1", "pool-a-7"} {
			a, err := pool.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: id})
			if err != nil || a.Decision != pb.Decision_DECISION_ALLOWED {
				t.Fatalf("pool-a Allow as %s = %v, %v; want ALLOWED", id, a.GetDecision(), err)
			}
			if _, err := pool.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: id, Ticket: a.Ticket, Outcome: pb.Outcome_OUTCOME_TIMEOUT}); err != nil {
				t.Fatalf("pool-a Record as %s: %v", id, err)
			}
		}
		if _, err := w9.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w9"}); err != nil {
			t.Errorf("w9 (token_sha256) Allow as w9: %v", err)
		}
		for what, call := range map[string]func() error{
			"Get":      func() error { _, err := pool.Get(ctx, &pb.GetRequest{Breaker: name}); return err },
			"BatchGet": func() error { _, err := pool.BatchGet(ctx, &pb.BatchGetRequest{Breakers: []string{name}}); return err },
			"List": func() error {
				_, err := client.ListEvery(ctx, pool, &pb.ListRequest{PageSize: store.MaxPageSize}, time.Minute)
				return err
			},
		} {
			if err := call(); err != nil {
				t.Errorf("worker %s: %v", what, err)
			}
		}

		// The wrong role: PermissionDenied, and the breaker untouched.
		before := d.Calls.Get("Force")
		_, err = pool.Force(ctx, &pb.ForceRequest{Breaker: name, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "x"})
		wantCode(t, "worker Force", err, codes.PermissionDenied, "role worker")
		if st, _ := d.Store.Get(ctx, name); st.State != pb.State_STATE_CLOSED {
			t.Errorf("after a denied Force: %v, want CLOSED", st.State)
		}
		if d.Calls.Get("Force") != before+1 {
			t.Errorf("the denied Force did not reach the daemon")
		}

		// A spoofed worker id: one process cannot be the quorum's second
		// worker.
		for _, spoof := range []string{"w2", "pool-b-1", "w9"} {
			_, err := pool.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: spoof})
			wantCode(t, "pool-a Allow as "+spoof, err, codes.PermissionDenied, `worker_id: token "pool-a" may not act as worker "`+spoof+`"`)
			_, err = pool.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: spoof, Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_TIMEOUT})
			wantCode(t, "pool-a Record as "+spoof, err, codes.PermissionDenied, "worker_id:")
			// A batch is checked record by record: one spoofed record
			// refuses it all, the honest one included.
			_, err = pool.RecordBatch(ctx, &pb.RecordBatchRequest{Records: []*pb.RecordRequest{
				{Breaker: name, WorkerId: "w1", Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_TIMEOUT},
				{Breaker: name, WorkerId: spoof, Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_TIMEOUT}}})
			wantCode(t, "pool-a RecordBatch with a record as "+spoof, err, codes.PermissionDenied, "records[1].worker_id:")
		}
		st, _ := d.Store.Get(ctx, name)
		if st.State != pb.State_STATE_CLOSED || st.Failures != 2 || st.DistinctWorkers != 2 {
			t.Fatalf("after the spoofs: %v, %d failures from %d workers; want CLOSED, 2 from 2 (w1, pool-a-7)", st.State, st.Failures, st.DistinctWorkers)
		}

		// An operator may do everything; its Force is recorded under the
		// token's name, whatever the request claims.
		if _, err := alice.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "anyone", Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
			t.Errorf("operator Record: %v", err)
		}
		f, err := alice.Force(ctx, &pb.ForceRequest{Breaker: name, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "vendor incident 42", Operator: "mallory"})
		if err != nil {
			t.Fatalf("operator Force: %v", err)
		}
		if f.State.ForcedBy != "alice" {
			t.Errorf("forced_by = %q, want alice (the token's name)", f.State.ForcedBy)
		}
		ev, err := b.Client.XRevRangeN(ctx, store.EventsKey(name), "+", "-", 1).Result()
		if err != nil || len(ev) != 1 || ev[0].Values["actor"] != "alice" || ev[0].Values["note"] != "vendor incident 42" || ev[0].Values["kind"] != "forced" {
			t.Errorf("last event %v (%v), want forced by alice with the reason", ev, err)
		}
	})
}

func TestHealthAndReflectionStayOpen(t *testing.T) {
	d := start(t, testredis.Mini(t))
	conn, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health without a token: %v", err)
	}
	rc, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err == nil {
		err = rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	}
	if err == nil {
		_, err = rc.Recv()
	}
	if err != nil {
		t.Errorf("reflection without a token: %v", err)
	}
}

func TestTokenNeverSentInPlaintextOffLoopback(t *testing.T) {
	d := start(t, testredis.Mini(t))
	// A plaintext connection whose authority is not loopback: the client
	// refuses before sending the token.
	api := dial(t, d.Addr, client.WithToken(aliceToken), client.WithDialOptions(grpc.WithAuthority("breakerd.example.com:7070")))
	_, err := api.Get(context.Background(), &pb.GetRequest{Breaker: "x"})
	if err == nil || !strings.Contains(err.Error(), "refusing to send the bearer token over plaintext") {
		t.Fatalf("Get over plaintext to a non-loopback authority: %v, want a refusal", err)
	}
	if n := d.Calls.Total(); n != 0 {
		t.Errorf("the daemon served %d calls, want 0 (nothing sent)", n)
	}
}

// rawBearer sends a hand-written authorization header.
type rawBearer struct{ conn string }

func (r *rawBearer) allow(t *testing.T, header, name string) (*pb.AllowResponse, error) {
	t.Helper()
	conn, err := grpc.NewClient(r.conn, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", header)
	return pb.NewBreakerServiceClient(conn).Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w1"})
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{``, "tokens: at least one"},
		{`tokens: [{role: operator, token: ` + aliceToken + `}]`, "tokens[0].name: is required"},
		{`tokens: [{name: "a\tb", role: operator, token: ` + aliceToken + `}]`, "tokens[0].name: must be printable"},
		{`tokens: [{name: a, role: admin, token: ` + aliceToken + `}]`, "tokens[0].role:"},
		{`tokens: [{name: a, role: operator, token: short}]`, "tokens[0].token: must be at least 16 bytes"},
		{`tokens: [{name: a, role: operator}]`, "tokens[0].token: give exactly one"},
		{`tokens: [{name: a, role: worker, token: ` + poolToken + `}]`, "tokens[0].workers:"},
		{`tokens: [{name: a, role: operator, token: ` + aliceToken + `, workers: [w1]}]`, "tokens[0].workers:"},
		{`tokens: [{name: a, role: worker, token: ` + poolToken + `, workers: ["pool a"]}]`, "tokens[0].workers[0]: is not a worker id"},
		{`tokens: [{name: a, role: operator, token_sha256: abc}]`, "tokens[0].token_sha256:"},
		{`tokens: [{name: a, role: operator, token: ` + aliceToken + `}, {name: a, role: operator, token: ` + poolToken + `}]`, "tokens[1].name:"},
		{`tokens: [{name: a, role: operator, token: ` + aliceToken + `}, {name: b, role: operator, token: ` + aliceToken + `}]`, "tokens[1].token: is the same"},
		{`tokens: [{name: a, role: operator, token: ` + aliceToken + `, colour: red}]`, "colour"},
	} {
		_, err := auth.Parse([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", c.yaml, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), aliceToken) || strings.Contains(err.Error(), poolToken)) {
			t.Errorf("Parse error %q contains a token", err)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7070": true, "localhost:7070": true, "[::1]:7070": true, "127.1.2.3:1": true,
		"0.0.0.0:7070": false, ":7070": false, "[::]:7070": false, "10.0.0.5:7070": false, "breakerd:7070": false, "junk": false,
	} {
		if got := auth.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func tlsDial(t *testing.T, addr string, cfg *tls.Config, token string) pb.BreakerServiceClient {
	t.Helper()
	opts := []client.Option{client.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(cfg)))}
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	return dial(t, addr, opts...)
}

func TestTLS(t *testing.T) {
	p := testtls.New(t)
	cfg, err := auth.ServerTLS(p.ServerCertFile, p.ServerKeyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	d := start(t, testredis.Mini(t), grpc.Creds(credentials.NewTLS(cfg)))
	ctx := context.Background()
	req := &pb.AllowRequest{Breaker: "web_search", WorkerId: "w1"}

	if _, err := tlsDial(t, d.Addr, &tls.Config{RootCAs: p.Pool}, poolToken).Allow(ctx, req); err != nil {
		t.Fatalf("Allow over TLS with a token: %v", err)
	}
	_, err = tlsDial(t, d.Addr, &tls.Config{RootCAs: p.Pool}, "").Allow(ctx, req)
	wantCode(t, "Allow over TLS without a token", err, codes.Unauthenticated, "authorization")
	_, err = dial(t, d.Addr, client.WithToken(poolToken)).Allow(ctx, req)
	wantCode(t, "Allow in plaintext to a TLS listener", err, codes.Unavailable, "")
	_, err = tlsDial(t, d.Addr, &tls.Config{RootCAs: x509.NewCertPool()}, poolToken).Allow(ctx, req)
	wantCode(t, "Allow trusting another CA", err, codes.Unavailable, "certificate")
	if n := d.Calls.Get("Allow"); n != 1 {
		t.Errorf("the daemon served %d Allows, want 1 (failed handshakes and missing tokens reach no handler)", n)
	}
}

func TestTLSClientCertificateRequired(t *testing.T) {
	p := testtls.New(t)
	cfg, err := auth.ServerTLS(p.ServerCertFile, p.ServerKeyFile, p.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	d := start(t, testredis.Mini(t), grpc.Creds(credentials.NewTLS(cfg)))
	ctx := context.Background()
	req := &pb.AllowRequest{Breaker: "web_search", WorkerId: "w1"}

	if _, err := tlsDial(t, d.Addr, &tls.Config{RootCAs: p.Pool, Certificates: []tls.Certificate{p.Client}}, poolToken).Allow(ctx, req); err != nil {
		t.Fatalf("Allow with a client certificate: %v", err)
	}
	for what, certs := range map[string][]tls.Certificate{"no client certificate": nil, "a certificate from another CA": {p.Other}} {
		_, err := tlsDial(t, d.Addr, &tls.Config{RootCAs: p.Pool, Certificates: certs}, poolToken).Allow(ctx, req)
		wantCode(t, "Allow with "+what, err, codes.Unavailable, "")
	}
	if n := d.Calls.Get("Allow"); n != 1 {
		t.Errorf("the daemon served %d Allows, want 1", n)
	}
}

func TestServerTLSErrors(t *testing.T) {
	p := testtls.New(t)
	if _, err := auth.ServerTLS(p.ServerCertFile, filepath.Join(t.TempDir(), "missing.key"), ""); err == nil || !strings.HasPrefix(err.Error(), "--tls-cert/--tls-key:") {
		t.Errorf("missing key: %v", err)
	}
	if _, err := auth.ServerTLS(p.ServerCertFile, p.ServerKeyFile, p.ServerKeyFile); err == nil || !strings.HasPrefix(err.Error(), "--tls-client-ca:") {
		t.Errorf("a key as the CA bundle: %v", err)
	}
}
