package httpapi_test

import (
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/httpapi"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
)

// get fetches path from d's HTTP listener without following redirects.
func get(t *testing.T, d *daemontest.Daemon, method, path string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+d.HTTPAddr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	return res, read(t, res).raw
}

// TestStatusPageFiles: /ui/ serves the page, its script and style sheet
// without a token (they hold no data), under a Content-Security-Policy
// that allows nothing from elsewhere and nothing inline.
func TestStatusPageFiles(t *testing.T) {
	d := tokens(t, testredis.Mini(t))
	if res, _ := get(t, d, http.MethodGet, "/ui"); res.StatusCode != http.StatusMovedPermanently || res.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui = %d to %q, want 301 to /ui/", res.StatusCode, res.Header.Get("Location"))
	}
	for path, want := range map[string]string{
		"/ui/":        "text/html",
		"/ui/app.js":  "text/javascript",
		"/ui/app.css": "text/css",
	} {
		res, body := get(t, d, http.MethodGet, path)
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), want) || body == "" {
			t.Errorf("GET %s without a token = %d %q (%d bytes), want 200 %s", path, res.StatusCode, res.Header.Get("Content-Type"), len(body), want)
		}
		csp := res.Header.Get("Content-Security-Policy")
		for _, directive := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, directive) {
				t.Errorf("GET %s: Content-Security-Policy %q lacks %q", path, csp, directive)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("GET %s: Content-Security-Policy %q allows inline code", path, csp)
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options = %q, want nosniff", path, res.Header.Get("X-Content-Type-Options"))
		}
	}
	if res, _ := get(t, d, http.MethodGet, "/ui/nope.js"); res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /ui/nope.js = %d, want 404", res.StatusCode)
	}
	if res, _ := get(t, d, http.MethodPost, "/ui/"); res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/ = %d, want 405", res.StatusCode)
	}
}

// TestStatusPageNeedsTheAPIsToken: everything the page shows comes
// through the API with the token typed in: nothing without one, reads
// with a worker's (the events of every breaker only with an
// operator's), Force only with an operator's.
func TestStatusPageNeedsTheAPIsToken(t *testing.T) {
	b := testredis.Mini(t)
	d := tokens(t, b)
	name := b.Breaker("ui")
	for _, tc := range []struct {
		what, method, token, body string
		status                    int
	}{
		{"no token, Events", "Events", "", `{}`, 401},
		{"no token, List", "List", "", `{}`, 401},
		{"no token, Force", "Force", "", `{"breaker":"` + name + `","mode":"FORCE_MODE_OPEN","reason":"r"}`, 401},
		{"worker, Events of every breaker", "Events", workerToken, `{"since_ms":3600000,"limit":100}`, 403},
		{"worker, Events of one breaker", "Events", workerToken, `{"breaker":"` + name + `","limit":100}`, 200},
		{"operator, Events of every breaker", "Events", opToken, `{"since_ms":3600000,"limit":100}`, 200},
		{"worker, List", "List", workerToken, `{"states":["STATE_FORCED_CLOSED"]}`, 200},
		{"worker, BatchGet", "BatchGet", workerToken, `{"breakers":["` + name + `"]}`, 200},
		{"worker, Force", "Force", workerToken, `{"breaker":"` + name + `","mode":"FORCE_MODE_OPEN","reason":"r"}`, 403},
	} {
		if a := post(t, d.HTTPAddr, tc.method, tc.token, tc.body); a.status != tc.status {
			t.Errorf("%s = %d %s, want %d", tc.what, a.status, a.raw, tc.status)
		}
	}
	if a := post(t, d.HTTPAddr, "Get", opToken, `{"breaker":"`+name+`"}`); a.str("state.state") != "STATE_CLOSED" {
		t.Errorf("after the refused Forces: %s, want STATE_CLOSED", a.raw)
	}
	res, err := http.Get("http://" + d.HTTPAddr + "/v1/watch")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/watch without a token = %d, want 401", res.StatusCode)
	}
	s := watch(t, d, url.Values{}, "", workerToken)
	snapshotNames(t, s)

	if a := post(t, d.HTTPAddr, "Force", opToken, `{"breaker":"`+name+`","mode":"FORCE_MODE_OPEN","reason":"drill","ttl_ms":"60000"}`); a.status != 200 || a.str("state.forced_by") != "alice" {
		t.Errorf("operator Force = %d %s, want 200 forced by alice", a.status, a.raw)
	}
	awaitEvent(t, s, name, "STATE_FORCED_OPEN")
}

// TestStatusPageForgesNoForce: the page holds no cookie and sends its
// token as a header, which another site's page cannot make a browser
// send; what it can send (a form or a no-cors fetch: a simple content
// type, cookies, its Origin) is refused before it reaches Force, with
// tokens and without.
func TestStatusPageForgesNoForce(t *testing.T) {
	b := testredis.Mini(t)
	withTokens := tokens(t, b)
	open := daemontest.StartWith(t, b, daemontest.Options{HTTP: &httpapi.Options{}})
	name := b.Breaker("csrf")
	forged := func(d *daemontest.Daemon, contentType, body string) int {
		req, err := http.NewRequest(http.MethodPost, "http://"+d.HTTPAddr+"/breakerd.v1.BreakerService/Force", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Origin", "https://evil.example")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		req.Header.Set("Cookie", "session="+opToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	jsonBody := `{"breaker":"` + name + `","mode":"FORCE_MODE_OPEN","reason":"forged"}`
	for _, tc := range []struct {
		what        string
		d           *daemontest.Daemon
		contentType string
		body        string
		status      int
	}{
		{"form, with tokens", withTokens, "application/x-www-form-urlencoded", "breaker=" + url.QueryEscape(name) + "&mode=FORCE_MODE_OPEN", 401},
		{"text/plain JSON, with tokens", withTokens, "text/plain", jsonBody, 401},
		{"form, without tokens", open, "application/x-www-form-urlencoded", "breaker=" + url.QueryEscape(name) + "&mode=FORCE_MODE_OPEN", 415},
		{"text/plain JSON, without tokens", open, "text/plain", jsonBody, 415},
		{"multipart, without tokens", open, "multipart/form-data; boundary=x", "--x--", 415},
	} {
		if got := forged(tc.d, tc.contentType, tc.body); got != tc.status {
			t.Errorf("a cross-site %s = %d, want %d", tc.what, got, tc.status)
		}
	}
	if a := post(t, withTokens.HTTPAddr, "Get", opToken, `{"breaker":"`+name+`"}`); a.str("state.state") != "STATE_CLOSED" {
		t.Errorf("after the forged Forces: %s, want STATE_CLOSED", a.raw)
	}
}

// TestStatusPageRendersText: the page's script sets worker-controlled
// text only as text and loads nothing from elsewhere; the browser test
// (internal/httpapi/browsertest) shows it in Chromium.
func TestStatusPageRendersText(t *testing.T) {
	markup := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setAttribute\(\s*['"]on`)
	remote := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	err := fs.WalkDir(os.DirFS("ui"), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(filepath.Join("ui", p))
		if err != nil {
			return err
		}
		if m := markup.Find(b); m != nil {
			t.Errorf("ui/%s uses %s: set text with textContent", p, m)
		}
		if m := remote.Find(b); m != nil {
			t.Errorf("ui/%s names %s: the page loads nothing from elsewhere", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWatchEndsWhenItsTokenIsRevoked: the stream the status page holds
// ends, saying why, when a reload takes its token out, as a gRPC Watch
// does; a stream of a token that stays is kept.
func TestWatchEndsWhenItsTokenIsRevoked(t *testing.T) {
	b := testredis.Mini(t)
	const file = "tokens:\n  - {name: alice, role: operator, token: " + opToken + "}\n"
	tk, err := auth.Parse([]byte(file + "  - {name: pool, role: worker, token: " + workerToken + ", workers: [w-*]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := auth.New(tk)
	d := daemontest.StartWith(t, b, daemontest.Options{HTTP: &httpapi.Options{Auth: a, Watch: &httpapi.Watch{}}, Server: a.ServerOptions()})
	worker := watch(t, d, url.Values{}, "", workerToken)
	operator := watch(t, d, url.Values{}, "", opToken)
	snapshotNames(t, worker)
	snapshotNames(t, operator)

	kept, err := auth.Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	a.Set(kept)
	var last sseEvent
	stuck := time.After(time.Minute) // heartbeats keep a stream busy: one bound for all
	for open := true; open; {
		select {
		case e, ok := <-worker.c:
			if open = ok; ok {
				last = e
			}
		case <-stuck:
			t.Fatal("the revoked token's stream is still open a minute after the reload")
		}
	}
	if last.typ != "resync" || !strings.Contains(last.data, `token \"pool\" was revoked`) {
		t.Errorf("the revoked token's stream ended with %q %s, want a resync saying its token was revoked", last.typ, last.data)
	}
	name := b.Breaker("kept")
	force(t, d, name, "OPEN")
	awaitEvent(t, operator, name, "STATE_FORCED_OPEN")
	if a := post(t, d.HTTPAddr, "Get", workerToken, `{"breaker":"`+name+`"}`); a.status != http.StatusUnauthorized {
		t.Errorf("the revoked token's next call = %d %s, want 401", a.status, a.raw)
	}
}
