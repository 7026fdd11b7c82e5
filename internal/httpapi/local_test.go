package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/httpapi"
	"github.com/breakerd/breakerd/internal/inproc"
	"github.com/breakerd/breakerd/internal/server"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
)

// transported counts the calls a gRPC server's transports carry (its
// stats handler sees each), by full method name: a call served in
// process is not among them.
type transported struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *transported) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	c.mu.Lock()
	c.n[info.FullMethodName]++
	c.mu.Unlock()
	return ctx
}
func (c *transported) HandleRPC(context.Context, stats.RPCStats) {}
func (c *transported) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (c *transported) HandleConn(context.Context, stats.ConnStats) {}

// total is how many BreakerService calls the transports carried.
func (c *transported) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for m, n := range c.n {
		if strings.HasPrefix(m, "/breakerd.v1.BreakerService/") {
			t += n
		}
	}
	return t
}

// seenCall is what a unary interceptor saw of one call: what the
// transport gave it (metadata, peer, deadline).
type seenCall struct {
	Method    string
	Auth      []string
	Authority []string
	Probe     []string
	Peer      string
	Local     string
	Deadline  bool
	Left      time.Duration
}

// witness records what its interceptor sees of each call.
type witness struct {
	mu  sync.Mutex
	got []seenCall
}

func (w *witness) option() grpc.ServerOption {
	return inproc.UnaryInterceptors(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		c := seenCall{Method: info.FullMethod, Auth: md.Get("authorization"), Authority: md.Get(":authority"), Probe: md.Get("x-probe")}
		if p, ok := peer.FromContext(ctx); ok {
			c.Peer = p.Addr.Network() + " " + p.Addr.String()
			if p.LocalAddr != nil {
				c.Local = p.LocalAddr.String()
			}
		}
		if dl, ok := ctx.Deadline(); ok {
			c.Deadline, c.Left = true, time.Until(dl)
		}
		w.mu.Lock()
		w.got = append(w.got, c)
		w.mu.Unlock()
		return h(ctx, req)
	})
}

func (w *witness) last() seenCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.got) == 0 {
		return seenCall{}
	}
	return w.got[len(w.got)-1]
}

// exchange is one HTTP answer, whole: status, headers, body.
type exchange struct {
	status int
	header http.Header
	body   []byte
}

// send makes one call over a connection of its own (so that each call's
// peer is new) and returns the whole answer.
func send(t *testing.T, addr, method string, header map[string]string, body []byte) exchange {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/breakerd.v1.BreakerService/"+method, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return exchange{status: res.StatusCode, header: res.Header, body: b}
}

// comparable is an answer with its Date's value blanked (its presence
// kept): the one part two answers a second apart may differ in.
func (e exchange) comparable() map[string]any {
	h := e.header.Clone()
	if _, ok := h["Date"]; ok {
		h["Date"] = []string{"(a date)"}
	}
	return map[string]any{"status": e.status, "header": h, "body": string(e.body)}
}

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	if _, err := io.WriteString(z, s); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestLocalCallsAnswerAsTheTranscoder sends each call, byte for byte,
// to two daemons on one backend: one serving unary RPCs in process, the
// other transcoding every RPC onto its gRPC server. The answers must be
// the same bytes (status, headers, body; a Date's value aside): successes,
// a refused token, a role's and a worker's refusals from the auth
// interceptor, a quota's ResourceExhausted, field errors from the codec
// and from the server with their details, a deadline already past, and
// the forms served only by the transcoder. The interceptors must see the
// same metadata, peer and deadline. The wire is the witness that the
// calls ran in process: the first daemon's gRPC transports carry none of
// them, the second's carry every one that reached its server.
func TestLocalCallsAnswerAsTheTranscoder(t *testing.T) {
	b := testredis.Mini(t)
	tk, err := auth.Parse([]byte("tokens:\n  - {name: alice, role: operator, token: " + opToken + "}\n" +
		"  - {name: pool, role: worker, token: " + workerToken + ", workers: [w-*]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := auth.New(tk)
	start := func(transcodeOnly bool) (*daemontest.Daemon, *transported, *witness) {
		wire := &transported{n: map[string]int{}}
		w := &witness{}
		d := daemontest.StartWith(t, b, daemontest.Options{
			HTTP:              &httpapi.Options{Auth: a},
			HTTPTranscodeOnly: transcodeOnly,
			Server:            append(a.ServerOptions(), grpc.StatsHandler(wire), w.option()),
			Limits:            server.Limits{NewBreakersPerMinute: 3},
		})
		return d, wire, w
	}
	local, localWire, localSaw := start(false)
	ref, refWire, refSaw := start(true)

	name := b.Breaker("same")
	worker := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + workerToken}
	with := func(h map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range h {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	const pastDeadline = "a deadline already past"
	raced := 0
	ticket := `{"generation":"0","lease_token":"","parent_generation":"0","parent_lease_token":"","shadow_denied":false}`
	for _, tc := range []struct {
		what, method string
		header       map[string]string
		body         []byte
		status       int
		// transcoded: the call is in a form only the transcoder serves,
		// so both daemons' transports carry it.
		transcoded bool
	}{
		{"Allow", "Allow", worker, []byte(`{"breaker":"` + name + `","worker_id":"w-1","tool":"search"}`), 200, false},
		{"Allow, the headers a browser sends", "Allow", with(worker, "Accept-Encoding", "gzip, deflate, br", "Accept", "application/json", "Content-Type", "application/json; charset=utf-8"),
			[]byte(`{"breaker":"` + name + `","worker_id":"w-2"}`), 200, false},
		{"Record", "Record", worker, []byte(`{"breaker":"` + name + `","worker_id":"w-1","outcome":"OUTCOME_SUCCESS","ticket":` + ticket + `}`), 200, false},
		{"RecordBatch", "RecordBatch", worker, []byte(`{"records":[{"breaker":"` + name + `","worker_id":"w-1","outcome":"OUTCOME_SUCCESS","ticket":` + ticket + `},` +
			`{"breaker":"` + name + `","worker_id":"w-2","outcome":"OUTCOME_SUCCESS","ticket":{}}]}`), 200, false},
		{"Get", "Get", worker, []byte(`{"breaker":"` + name + `"}`), 200, false},
		{"GetPolicy", "GetPolicy", worker, []byte(`{"breaker":"` + name + `"}`), 200, false},
		{"an unknown token", "Allow", with(worker, "Authorization", "Bearer not-a-token-0123456789"), []byte(`{"breaker":"` + name + `","worker_id":"w-1"}`), 401, false},
		{"a worker acting as another", "Allow", worker, []byte(`{"breaker":"` + name + `","worker_id":"x-1"}`), 403, false},
		{"a worker forcing", "Force", worker, []byte(`{"breaker":"` + name + `","mode":"FORCE_MODE_OPEN","reason":"r"}`), 403, false},
		{"a batch record acting as another", "RecordBatch", worker, []byte(`{"records":[{"breaker":"` + name + `","worker_id":"w-1","outcome":"OUTCOME_SUCCESS","ticket":{}},` +
			`{"breaker":"` + name + `","worker_id":"x-1","outcome":"OUTCOME_SUCCESS","ticket":{}}]}`), 403, false},
		{"a server-side field error", "Allow", worker, []byte(`{"breaker":"","worker_id":"w-1"}`), 400, false},
		{"a nested server-side field error", "Record", worker, []byte(`{"breaker":"` + name + `","worker_id":"w-1","outcome":"OUTCOME_SUCCESS","ticket":{"generation":"-1"}}`), 400, false},
		{"an unknown field", "Allow", worker, []byte(`{"breaker":"` + name + `","worker_id":"w-1","bogus":1}`), 400, false},
		{"a wrong type", "Record", worker, []byte(`{"breaker":"` + name + `","worker_id":"w-1","outcome":"OUTCOME_SUCCESS","ticket":{"generation":true}}`), 400, false},
		{"not JSON", "Allow", worker, []byte(`{"breaker":`), 400, false},
		{pastDeadline, "Allow", with(worker, "Connect-Timeout-Ms", "0"), []byte(`{"breaker":"` + name + `","worker_id":"w-1"}`), 504, false},
		{"a deadline", "Allow", with(worker, "Connect-Timeout-Ms", "5000"), []byte(`{"breaker":"` + name + `","worker_id":"w-1"}`), 200, false},
		{"the first new breaker", "Allow", worker, []byte(`{"breaker":"` + b.Breaker("new-1") + `","worker_id":"w-1"}`), 200, false},
		{"the second new breaker", "Allow", worker, []byte(`{"breaker":"` + b.Breaker("new-2") + `","worker_id":"w-1"}`), 200, false},
		{"a new breaker past the quota", "Allow", worker, []byte(`{"breaker":"` + b.Breaker("new-3") + `","worker_id":"w-1"}`), 429, false},
		{"an empty body", "Allow", worker, nil, 500, true},
		{"a malformed timeout", "Allow", with(worker, "Connect-Timeout-Ms", "soon"), []byte(`{"breaker":"` + name + `","worker_id":"w-1"}`), 400, true},
		{"a compressed body", "Allow", with(worker, "Content-Encoding", "gzip"), gzipped(t, `{"breaker":"`+name+`","worker_id":"w-1"}`), 0, true},
	} {
		beforeLocal, beforeRef := localWire.total(), refWire.total()
		ranBefore := ref.Calls.Get(tc.method)
		header := with(tc.header, "X-Probe", tc.what)
		got := send(t, local.HTTPAddr, tc.method, header, tc.body)
		want := send(t, ref.HTTPAddr, tc.method, header, tc.body)
		if tc.status != 0 && want.status != tc.status {
			t.Errorf("%s: the transcoder answered %d %s, want %d", tc.what, want.status, want.body, tc.status)
		}
		if tc.what == pastDeadline && ref.Calls.Get(tc.method) > ranBefore {
			// The gRPC server races a deadline already past against
			// reading a request already arrived; now and then it reads
			// it, runs the handler, and the store names the deadline.
			// In process the deadline always wins, the common outcome.
			raced++
			if !bytes.Contains(want.body, []byte(`"code":"deadline_exceeded"`)) || got.status != want.status {
				t.Errorf("%s: in process %d %s, transcoded %d %s: want both deadline_exceeded", tc.what, got.status, got.body, want.status, want.body)
			}
			continue
		}
		if diff := cmp.Diff(want.comparable(), got.comparable()); diff != "" {
			t.Errorf("%s: %s answered in process differs from the transcoder's answer (-want +got):\n%s", tc.what, tc.method, diff)
		}
		carried := localWire.total() - beforeLocal
		if reached := refWire.total() - beforeRef; tc.transcoded && carried != reached {
			t.Errorf("%s: the local daemon's transports carried %d calls, the transcoding one's %d: want the transcoder's path on both", tc.what, carried, reached)
		}
		if !tc.transcoded && carried != 0 {
			t.Errorf("%s: the local daemon's gRPC transports carried %d calls, want 0 (served in process)", tc.what, carried)
		}
	}
	if n := refWire.total(); n < 15 {
		t.Errorf("the transcoding daemon's transports carried %d calls, want every call that reached its server", n)
	}
	for _, m := range []string{"Allow", "Record", "RecordBatch", "Get", "GetPolicy", "Force"} {
		l, r := local.Calls.Get(m), ref.Calls.Get(m)
		if m == "Allow" {
			r -= raced
		}
		if l != r || l == 0 {
			t.Errorf("%s: the interceptors ran %d times in process, %d transcoded: want the same, more than 0", m, l, r)
		}
	}

	// What the interceptors see: the same metadata, the peer as the
	// transport names it, the deadline.
	for _, tc := range []struct {
		what, timeout string
	}{{"no deadline", ""}, {"a deadline", "5000"}} {
		header := with(worker, "X-Probe", tc.what)
		if tc.timeout != "" {
			header["Connect-Timeout-Ms"] = tc.timeout
		}
		body := []byte(`{"breaker":"` + name + `","worker_id":"w-1"}`)
		send(t, local.HTTPAddr, "Allow", header, body)
		send(t, ref.HTTPAddr, "Allow", header, body)
		got, want := localSaw.last(), refSaw.last()
		if got.Deadline != want.Deadline || (want.Deadline && (got.Left <= 0 || got.Left > 5*time.Second)) {
			t.Errorf("%s: in process the deadline is %v (%v left), transcoded %v (%v left)", tc.what, got.Deadline, got.Left, want.Deadline, want.Left)
		}
		for _, c := range []*seenCall{&got, &want} {
			if !strings.HasPrefix(c.Peer, "tcp 127.0.0.1:") {
				t.Errorf("%s: the peer is %q, want the caller's TCP address", tc.what, c.Peer)
			}
			c.Peer, c.Deadline, c.Left = "(the caller)", false, 0
		}
		want.Local, want.Authority = local.HTTPAddr, []string{local.HTTPAddr}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: what the interceptors saw in process differs from a transcoded call (-want +got):\n%s", tc.what, diff)
		}
		if !slices.Equal(got.Auth, []string{"Bearer " + workerToken}) || !slices.Equal(got.Probe, []string{tc.what}) {
			t.Errorf("%s: the interceptors saw authorization %q and x-probe %q, want the request's", tc.what, got.Auth, got.Probe)
		}
	}
}
