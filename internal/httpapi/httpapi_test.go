package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/httpapi"
	"github.com/breakerd/breakerd/internal/inproc"
	"github.com/breakerd/breakerd/internal/protocol"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
)

const (
	opToken     = "op-token-0123456789abcdef"
	workerToken = "worker-token-0123456789abcdef"
)

// answer is one HTTP answer: its status, raw body and decoded JSON.
type answer struct {
	status int
	raw    string
	json   map[string]any
}

// str returns the string at a dotted path of the answer's JSON ("" when absent).
func (a answer) str(path string) string {
	var v any = a.json
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[k]
	}
	s, _ := v.(string)
	return s
}

// violations returns the answer's field_violations' fields.
func (a answer) violations() []string {
	vs, _ := a.json["field_violations"].([]any)
	var out []string
	for _, v := range vs {
		m, _ := v.(map[string]any)
		f, _ := m["field"].(string)
		out = append(out, f)
	}
	return out
}

// post calls an RPC with a JSON body.
func post(t *testing.T, addr, method, token, body string) answer {
	t.Helper()
	return do(t, addr, method, token, "application/json", body)
}

func do(t *testing.T, addr, method, token, contentType, body string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/breakerd.v1.BreakerService/"+method, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	return read(t, res)
}

func read(t *testing.T, res *http.Response) answer {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: res.StatusCode, raw: string(b)}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(b, &a.json); err != nil {
			t.Fatalf("answer %d is not JSON: %v: %s", res.StatusCode, err, b)
		}
	}
	return a
}

// raw sends head (a request line and headers, without the blank line
// that ends them) over a fresh connection, then the body, if any, from
// another goroutine, and reads the answer: a refusal that comes before
// the body is sent proves the body was never needed.
func raw(t *testing.T, addr, head string, body func(io.Writer)) answer {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := io.WriteString(conn, head+"\r\n\r\n"); err != nil {
			return
		}
		if body != nil {
			body(conn)
		}
	}()
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer res.Body.Close()
	a := read(t, res)
	_ = conn.Close() // unblocks a body writer the server stopped reading
	return a
}

// protocols records the protocol (protocol.From) each unary call saw.
type protocols struct {
	mu  sync.Mutex
	got []protocol.Name
}

func (p *protocols) option() grpc.ServerOption {
	return inproc.UnaryInterceptors(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		p.mu.Lock()
		p.got = append(p.got, protocol.From(ctx))
		p.mu.Unlock()
		return h(ctx, req)
	})
}

// TestRPCsOverHTTPJSON trips a breaker from two workers over HTTP/JSON,
// reads it, and forces it closed: proto field names, int64 as strings,
// enums as names, and every call marked as HTTP in its context.
func TestRPCsOverHTTPJSON(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		var seen protocols
		d := daemontest.StartWith(t, b, daemontest.Options{HTTP: &httpapi.Options{}, Server: []grpc.ServerOption{seen.option()}})
		name := b.Breaker("search")
		first := post(t, d.HTTPAddr, "Allow", "", fmt.Sprintf(`{"breaker":%q,"worker_id":"w1"}`, name))
		if first.status != http.StatusOK || first.str("decision") != "DECISION_ALLOWED" || first.str("state.state") != "STATE_CLOSED" {
			t.Fatalf("Allow = %d %s, want 200 DECISION_ALLOWED on STATE_CLOSED", first.status, first.raw)
		}
		for _, want := range []string{`"retry_after_ms":"0"`, `"as_of_ms":"`, `"lease_token":""`} {
			if !strings.Contains(first.raw, want) {
				t.Errorf("Allow's body lacks %s (proto names, int64 as strings, zeros written): %s", want, first.raw)
			}
		}
		var denied answer
		for i := 0; i < 50 && denied.str("decision") == ""; i++ {
			w := fmt.Sprintf("w%d", i%2+1)
			a := post(t, d.HTTPAddr, "Allow", "", fmt.Sprintf(`{"breaker":%q,"worker_id":%q}`, name, w))
			if a.str("decision") != "DECISION_ALLOWED" {
				denied = a
				break
			}
			ticket, _ := json.Marshal(a.json["ticket"])
			rec := post(t, d.HTTPAddr, "Record", "", fmt.Sprintf(`{"breaker":%q,"worker_id":%q,"outcome":"OUTCOME_TRANSPORT","ticket":%s}`, name, w, ticket))
			if rec.status != http.StatusOK {
				t.Fatalf("Record = %d %s", rec.status, rec.raw)
			}
		}
		if !strings.HasPrefix(denied.str("decision"), "DECISION_DENIED") {
			t.Fatalf("failures from two workers over HTTP: last Allow = %s, want a denial", denied.raw)
		}
		if got := post(t, d.HTTPAddr, "Get", "", fmt.Sprintf(`{"breaker":%q}`, name)); got.str("state.state") != "STATE_OPEN" {
			t.Errorf("Get = %s, want STATE_OPEN", got.raw)
		}
		forced := post(t, d.HTTPAddr, "Force", "", fmt.Sprintf(`{"breaker":%q,"mode":"FORCE_MODE_CLOSED","reason":"vendor fixed","operator":"alice"}`, name))
		if forced.str("state.state") != "STATE_FORCED_CLOSED" || forced.str("state.forced_by") != "alice" {
			t.Errorf("Force = %s, want STATE_FORCED_CLOSED by alice", forced.raw)
		}
		seen.mu.Lock()
		defer seen.mu.Unlock()
		for i, p := range seen.got {
			if p != protocol.HTTP {
				t.Fatalf("call %d saw protocol %q in its context, want %q", i, p, protocol.HTTP)
			}
		}
	})
}

// TestBadInputOverHTTPStoresNothing: malformed JSON, unknown fields, a
// wrong type or enum, a wrong content type, an oversized body (declared
// or streamed) and a header flood are each refused, naming the field (or
// the size), without one Redis round trip.
func TestBadInputOverHTTPStoresNothing(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.StartWith(t, b, daemontest.Options{HTTP: &httpapi.Options{MaxBodyBytes: 64 << 10}})
		name := b.Breaker("bad-input")
		b.ResetCounts()
		for _, tc := range []struct {
			what, method, contentType, body string
			status                          int
			field, message                  string
		}{
			{"malformed JSON", "Allow", "application/json", `{"breaker":`, 400, "", "request body is not valid JSON"},
			{"unknown field", "Allow", "application/json", `{"breaker":"` + name + `","worker_id":"w1","bogus":1}`, 400, "bogus", "bogus: unknown field"},
			{"nested unknown field", "Record", "application/json", `{"breaker":"` + name + `","worker_id":"w1","outcome":"OUTCOME_TRANSPORT","ticket":{"generation":"0","x":1}}`, 400, "ticket.x", "ticket.x: "},
			{"wrong type", "Allow", "application/json", `{"breaker":"` + name + `","worker_id":5}`, 400, "worker_id", "worker_id: must be a JSON string"},
			{"unknown enum", "Record", "application/json", `{"breaker":"` + name + `","worker_id":"w1","outcome":"OUTCOME_NOPE","ticket":{}}`, 400, "outcome",
				`outcome: unknown value "OUTCOME_NOPE" of breakerd.v1.Outcome; want one of OUTCOME_SUCCESS, OUTCOME_TRANSPORT,`},
			{"enum without its prefix", "Record", "application/json", `{"breaker":"` + name + `","worker_id":"w1","outcome":"timeout","ticket":{}}`, 400, "outcome",
				`outcome: unknown value "timeout" of breakerd.v1.Outcome; did you mean OUTCOME_TIMEOUT?`},
			{"int out of range", "List", "application/json", `{"page_size":99999999999}`, 400, "page_size", "page_size: must be a 32-bit integer"},
			{"not an object", "Allow", "application/json", `[1]`, 400, "(body)", "(body): must be a JSON object"},
			{"wrong content type", "Allow", "text/plain", `{"breaker":"` + name + `","worker_id":"w1"}`, 415, "Content-Type", "Content-Type: must be application/json"},
			{"no content type", "Allow", "", `{"breaker":"` + name + `","worker_id":"w1"}`, 415, "Content-Type", "Content-Type: must be application/json"},
			{"server-side validation", "Allow", "application/json", `{"breaker":"","worker_id":"w1"}`, 400, "breaker", "breaker: is required"},
			{"server-side validation, nested", "Record", "application/json", `{"breaker":"` + name + `","worker_id":"w1","outcome":"OUTCOME_SUCCESS","ticket":{"generation":"-1"}}`, 400, "ticket.generation", "ticket.generation: "},
		} {
			a := do(t, d.HTTPAddr, tc.method, "", tc.contentType, tc.body)
			if a.status != tc.status || a.str("code") != "invalid_argument" || !strings.HasPrefix(a.str("message"), tc.message) {
				t.Errorf("%s: %s = %d %s, want %d invalid_argument %q…", tc.what, tc.method, a.status, a.raw, tc.status, tc.message)
			}
			if tc.field != "" && (len(a.violations()) != 1 || a.violations()[0] != tc.field) {
				t.Errorf("%s: field_violations name %q, want [%q]: %s", tc.what, a.violations(), tc.field, a.raw)
			}
		}
		// 8 MiB declared: refused from the headers, the body never sent.
		big := raw(t, d.HTTPAddr, "POST /breakerd.v1.BreakerService/Allow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 8388608", nil)
		if big.status != http.StatusRequestEntityTooLarge || big.str("code") != "resource_exhausted" {
			t.Errorf("8 MiB declared body = %d %s, want 413 resource_exhausted", big.status, big.raw)
		}
		// 8 MiB streamed (chunked, no length): cut at the bound.
		streamed := raw(t, d.HTTPAddr, "POST /breakerd.v1.BreakerService/Allow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked", func(w io.Writer) {
			chunk := fmt.Sprintf("%x\r\n%s\r\n", 64<<10, `{"breaker":"`+strings.Repeat("x", 64<<10-12))
			for range 128 {
				if _, err := io.WriteString(w, chunk); err != nil {
					return
				}
			}
		})
		if streamed.status < 400 || streamed.str("code") != "resource_exhausted" {
			t.Errorf("8 MiB streamed body = %d %s, want a resource_exhausted refusal", streamed.status, streamed.raw)
		}
		flood := raw(t, d.HTTPAddr, "POST /breakerd.v1.BreakerService/Allow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Flood: "+strings.Repeat("a", 8<<20), nil)
		if flood.status != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("8 MiB header = %d %s, want 431", flood.status, flood.raw)
		}
		if u := do(t, d.HTTPAddr, "Nope", "", "application/json", `{}`); u.status != http.StatusNotFound || u.str("code") != "unimplemented" || !strings.Contains(u.str("message"), `no RPC "Nope"`) {
			t.Errorf("an unknown RPC = %d %s, want a JSON 404 unimplemented naming it", u.status, u.raw)
		}
		if n := b.RoundTrips(); n != 0 {
			t.Errorf("bad input over HTTP made %d Redis round trips, want 0", n)
		}
	})
}

// tokens starts a daemon with an operator and a worker token (acting as
// w-*), its HTTP front (and GET /v1/watch) checking them as its gRPC
// interceptors do.
func tokens(t *testing.T, b *testredis.Backend) *daemontest.Daemon {
	t.Helper()
	tk, err := auth.Parse([]byte("tokens:\n  - {name: alice, role: operator, token: " + opToken + "}\n" +
		"  - {name: pool, role: worker, token: " + workerToken + ", workers: [w-*]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := auth.New(tk)
	return daemontest.StartWith(t, b, daemontest.Options{HTTP: &httpapi.Options{Auth: a, Watch: &httpapi.Watch{}}, Server: a.ServerOptions()})
}

// TestTokensAreCheckedBeforeTheBody: without a known token an 8 MiB body
// is refused from the headers alone (never sent), as an 8 MiB header is;
// roles and worker ids hold over HTTP as over gRPC.
func TestTokensAreCheckedBeforeTheBody(t *testing.T) {
	b := testredis.Mini(t)
	d := tokens(t, b)
	name := b.Breaker("search")
	b.ResetCounts()
	for _, auth := range []string{"", "\r\nAuthorization: Bearer not-a-token-0123456789"} {
		a := raw(t, d.HTTPAddr, "POST /breakerd.v1.BreakerService/Allow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 8388608"+auth, nil)
		if a.status != http.StatusUnauthorized || a.str("code") != "unauthenticated" {
			t.Errorf("unauthenticated 8 MiB body (%q) = %d %s, want 401 unauthenticated before the body", auth, a.status, a.raw)
		}
	}
	flood := raw(t, d.HTTPAddr, "POST /breakerd.v1.BreakerService/Allow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Flood: "+strings.Repeat("a", 8<<20), nil)
	if flood.status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("unauthenticated 8 MiB header = %d %s, want 431", flood.status, flood.raw)
	}
	if n := b.RoundTrips(); n != 0 {
		t.Errorf("refused calls made %d Redis round trips, want 0", n)
	}
	for _, tc := range []struct {
		what, method, token, body string
		status                    int
		code                      string
	}{
		{"worker as its own worker", "Allow", workerToken, `{"breaker":"` + name + `","worker_id":"w-1"}`, 200, ""},
		{"worker as another worker", "Allow", workerToken, `{"breaker":"` + name + `","worker_id":"x-1"}`, 403, "permission_denied"},
		{"worker forcing", "Force", workerToken, `{"breaker":"` + name + `","mode":"FORCE_MODE_OPEN","reason":"r"}`, 403, "permission_denied"},
		{"operator forcing", "Force", opToken, `{"breaker":"` + name + `","mode":"FORCE_MODE_OPEN","reason":"r"}`, 200, ""},
	} {
		a := post(t, d.HTTPAddr, tc.method, tc.token, tc.body)
		if a.status != tc.status || a.str("code") != tc.code {
			t.Errorf("%s: %s = %d %s, want %d %q", tc.what, tc.method, a.status, a.raw, tc.status, tc.code)
		}
	}
	if got := post(t, d.HTTPAddr, "Get", opToken, `{"breaker":"`+name+`"}`); got.str("state.forced_by") != "alice" {
		t.Errorf("a Force over HTTP is recorded under the token's name: Get = %s, want forced_by alice", got.raw)
	}
}

// TestHealthz answers the gRPC health service's status per service.
func TestHealthz(t *testing.T) {
	d := tokens(t, testredis.Mini(t))
	for _, tc := range []struct {
		query  string
		status int
		want   string
	}{
		{"", 200, `"SERVING"`},
		{"?service=breakerd.v1.BreakerService", 200, `"SERVING"`},
		{"?service=nope", 404, `"not_found"`},
	} {
		res, err := http.Get("http://" + d.HTTPAddr + "/healthz" + tc.query)
		if err != nil {
			t.Fatal(err)
		}
		a := read(t, res)
		res.Body.Close()
		if a.status != tc.status || !strings.Contains(a.raw, tc.want) {
			t.Errorf("GET /healthz%s = %d %s, want %d %s (open without a token)", tc.query, a.status, a.raw, tc.status, tc.want)
		}
	}
}

// TestCORSOnlyWhenConfigured: no CORS headers by default; the configured
// origins get them, preflight included.
func TestCORSOnlyWhenConfigured(t *testing.T) {
	b := testredis.Mini(t)
	off := daemontest.StartWith(t, b, daemontest.Options{HTTP: &httpapi.Options{}})
	on := daemontest.StartWith(t, b, daemontest.Options{HTTP: &httpapi.Options{CORSOrigins: []string{"https://app.example"}}})
	preflight := func(addr, origin string) string {
		req, _ := http.NewRequest(http.MethodOptions, "http://"+addr+"/breakerd.v1.BreakerService/Allow", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization,content-type")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.Header.Get("Access-Control-Allow-Origin")
	}
	if got := preflight(off.HTTPAddr, "https://app.example"); got != "" {
		t.Errorf("CORS unconfigured: Access-Control-Allow-Origin = %q, want none", got)
	}
	if got := preflight(on.HTTPAddr, "https://app.example"); got != "https://app.example" {
		t.Errorf("configured origin: Access-Control-Allow-Origin = %q, want it", got)
	}
	if got := preflight(on.HTTPAddr, "https://evil.example"); got != "" {
		t.Errorf("other origin: Access-Control-Allow-Origin = %q, want none", got)
	}
}
