// Package browsertest drives breakerd's status page (/ui/) in Chromium
// through chromedp, against a breakerd binary built from this tree. It is
// a module of its own so that the main module does not depend on chromedp.
// It runs when BREAKERD_TEST_CHROMIUM is set (scripts/test.sh sets it):
// to the browser's path, or to 1 for chromium on PATH.
package browsertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

const (
	operatorToken = "ui-operator-token-0123456789"
	workerToken   = "ui-worker-token-0123456789ab"
	// xssName is a breaker name a worker chose to be read as markup.
	xssName = `<img src=x onerror="document.title='pwned'">`
)

// TestStatusPage: the page loads; a breaker tripped after it connected
// appears without a reload; a name made of markup shows as its
// characters; the calls the open breaker refused show as its savings; a
// suspect worker and the timelines show; Force is refused to a worker's
// token and works with an operator's; a snapshot in parts lists every
// breaker of every part.
func TestStatusPage(t *testing.T) {
	browser := browserPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	d := startDaemon(ctx, t, true)

	ctx, stop := newBrowser(ctx, t, browser)
	defer stop()
	problems := watchConsole(ctx)

	// The page loads and connects with a worker's token.
	must(t, "load the page", chromedp.Do(ctx, chromedp.Navigate(d.url+"/ui"), chromedp.WaitVisible(chromedp.ID("token"))))
	must(t, "tap the page's wire", chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](tapJS)))
	signIn(ctx, t, workerToken)
	must(t, "mark the document", chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.sameDocument = true`)))

	// Breakers tripped now appear, live, the markup name as text.
	tripped := "search:vendor-a"
	for _, name := range []string{tripped, xssName} {
		d.trip(t, name)
	}
	for _, name := range []string{tripped, xssName} {
		await(ctx, t, "the tripped breaker "+name+" listed open",
			fmt.Sprintf(`[...document.querySelectorAll('#breakers tbody tr')].some(tr => tr.dataset.breaker === %s && tr.cells[1].textContent === 'open')`, js(name)))
	}
	type shown struct {
		Text, Title string
		Images      int
		Same        bool
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[shown](fmt.Sprintf(`(() => {
		const b = [...document.querySelectorAll('#breakers button.name')].find(b => b.dataset.breaker === %s);
		return {Text: b.textContent, Title: document.title, Images: document.images.length, Same: window.sameDocument === true};
	})()`, js(xssName))))
	must(t, "read the markup name's row", err)
	if got.Text != xssName || got.Images != 0 || got.Title != "breakerd status" {
		t.Errorf("the breaker named %s shows as %q with %d images and title %q; want its characters, no image, the title untouched", xssName, got.Text, got.Images, got.Title)
	}
	if !got.Same {
		t.Errorf("the page was reloaded: want the breakers to appear in the same document")
	}

	// What the open breaker saved: the calls the daemon refused, priced
	// by its policy's cost_per_call (read again on Refresh: a refused
	// call is no event).
	for range 3 {
		d.deny(t, tripped, "w-3")
	}
	await(ctx, t, "the savings of "+tripped, fmt.Sprintf(`(() => {
		const shown = [...document.querySelectorAll('#savings tbody tr')].some(tr => tr.dataset.breaker === %s &&
			Number(tr.cells[2].textContent.replace(/,/g, '')) >= 3 && tr.cells[5].textContent.endsWith(' USD'));
		if (!shown) document.getElementById('savings-refresh').click();
		return shown;
	})()`, js(tripped)))

	// A worker failing alone is a suspect, listed with its breaker.
	d.suspect(t, "search:vendor-c", "w-9")
	await(ctx, t, "w-9 listed as a suspect", `[...document.querySelectorAll('#suspects tbody tr')].some(tr =>
		tr.cells.length > 1 && tr.cells[0].textContent === 'w-9' && tr.cells[1].textContent === 'search:vendor-c')`)

	// Its timeline, from the event log.
	openTimeline(ctx, t, tripped, "closed → open")

	// Force: refused to the worker's token, the breaker untouched.
	forced := "billing:vendor-b"
	submitForce(ctx, t, forced, "drill from the page")
	await(ctx, t, "the worker's Force refused", `document.getElementById('force-result').dataset.ok === 'false' &&
		document.getElementById('force-result').textContent.includes('permission_denied')`)
	if st := d.state(t, forced); st.State != "STATE_CLOSED" {
		t.Errorf("after a worker's Force from the page, %s is %s; want STATE_CLOSED", forced, st.State)
	}

	// Force with the operator's token: done, recorded under its name, and
	// listed live.
	must(t, "sign out", chromedp.Do(ctx, chromedp.Click(chromedp.ID("signout"))))
	signIn(ctx, t, operatorToken)
	submitForce(ctx, t, forced, "drill from the page")
	await(ctx, t, "the operator's Force done", `document.getElementById('force-result').dataset.ok === 'true'`)
	await(ctx, t, forced+" listed forced open by alice", fmt.Sprintf(`[...document.querySelectorAll('#breakers tbody tr')].some(tr =>
		tr.dataset.breaker === %s && tr.cells[1].textContent === 'forced open' && tr.cells[2].textContent === 'drill from the page' && tr.cells[5].textContent === 'alice')`, js(forced)))
	if st := d.state(t, forced); st.State != "STATE_FORCED_OPEN" || st.ForcedBy != "alice" {
		t.Errorf("after the operator's Force from the page, %s is %s by %q; want STATE_FORCED_OPEN by alice", forced, st.State, st.ForcedBy)
	}

	openTimeline(ctx, t, forced, "closed → forced open")

	// Each live event carried its breaker's state: the page read none of
	// them again (a Get only for an event the daemon sent without it).
	w, err := chromedp.Run(ctx, chromedp.Evaluate[wire](`window.uiWire`))
	must(t, "read the wire tap", err)
	if w.Events < 4 || w.Gets != w.Stateless {
		t.Errorf("the page heard %d live events, %d without a state, and sent %d Gets; want at least 4 events and a Get only for each without a state", w.Events, w.Stateless, w.Gets)
	}

	screenshot(ctx, t)

	// A snapshot of more breakers than one part holds (256) comes in
	// parts: signed in again, the page lists every one.
	const bulk = 300
	for i := range bulk {
		var r struct{}
		d.call(t, "Force", operatorToken, map[string]string{"breaker": fmt.Sprintf("bulk:%03d", i), "mode": "FORCE_MODE_OPEN", "reason": "drill"}, &r)
	}
	must(t, "sign out", chromedp.Do(ctx, chromedp.Click(chromedp.ID("signout"))))
	signIn(ctx, t, operatorToken)
	await(ctx, t, fmt.Sprintf("the %d forced breakers of a snapshot in parts listed", bulk), fmt.Sprintf(
		`[...document.querySelectorAll('#breakers tbody tr')].filter(tr => (tr.dataset.breaker || '').startsWith('bulk:')).length === %d`, bulk))
	for _, p := range problems() {
		t.Errorf("the page's console: %s", p)
	}
}

// browserPath is the Chromium to run (BREAKERD_TEST_CHROMIUM); the test
// is skipped without one.
func browserPath(t *testing.T) string {
	browser := os.Getenv("BREAKERD_TEST_CHROMIUM")
	if browser == "" {
		t.Skip("BREAKERD_TEST_CHROMIUM is not set (scripts/test.sh sets it): no browser test")
	}
	if browser == "1" {
		p, err := exec.LookPath("chromium")
		if err != nil {
			t.Fatalf("BREAKERD_TEST_CHROMIUM=1 but no chromium on PATH: %v", err)
		}
		browser = p
	}
	return browser
}

// TestStatusPageSaysWhatItHeard: opened before Connect, with four
// breakers open or forced, the page never says every breaker is closed:
// it says it has heard nothing yet, and that a token is wanted. A daemon
// without tokens needs none: its page connects by itself and lists them.
func TestStatusPageSaysWhatItHeard(t *testing.T) {
	browser := browserPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ctx, stop := newBrowser(ctx, t, browser)
	defer stop()
	problems := watchConsole(ctx)
	names := []string{"search:vendor-a", "search:vendor-b", "billing:vendor-c", "billing:vendor-d"}
	for _, tokens := range []bool{true, false} {
		d := startDaemon(ctx, t, tokens)
		d.trip(t, names[0])
		d.trip(t, names[1])
		for _, n := range names[2:] {
			var r struct{}
			d.call(t, "Force", operatorToken, map[string]string{"breaker": n, "mode": "FORCE_MODE_OPEN", "reason": "drill"}, &r)
		}
		must(t, "load the page", chromedp.Do(ctx, chromedp.Navigate(d.url+"/ui"), chromedp.WaitVisible(chromedp.ID("token"))))
		if tokens {
			await(ctx, t, "the page asking for a token", `document.getElementById('status').textContent.includes('wants a token')`)
			text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#breakers tbody').textContent`))
			must(t, "read the breakers table", err)
			if strings.Contains(text, "every breaker is closed") || !strings.Contains(text, "nothing heard yet") {
				t.Errorf("before Connect, with 4 breakers open or forced, the breakers table reads %q; want that nothing was heard yet", text)
			}
			continue
		}
		await(ctx, t, "the tokenless daemon's page live by itself", `document.getElementById('status').dataset.state === 'live'`)
		for _, n := range names {
			await(ctx, t, n+" listed", fmt.Sprintf(`[...document.querySelectorAll('#breakers tbody tr')].some(tr => tr.dataset.breaker === %s)`, js(n)))
		}
	}
	for _, p := range problems() {
		t.Errorf("the page's console: %s", p)
	}
}

// tapJS wraps the page's fetch to count, in window.uiWire, the Get RPCs
// it sends and the live events it hears on /v1/watch (a copy of the
// stream, read apart), with those that carry no breaker state.
const tapJS = `(() => {
	const w = window.uiWire = {Gets: 0, Events: 0, Stateless: 0};
	const fetch0 = window.fetch;
	window.fetch = async (url, init) => {
		if (String(url).endsWith('/breakerd.v1.BreakerService/Get')) w.Gets++;
		const res = await fetch0(url, init);
		if (!String(url).startsWith('/v1/watch') || !res.ok) return res;
		const [mine, page] = res.body.tee();
		(async () => {
			const r = mine.pipeThrough(new TextDecoderStream()).getReader();
			let buf = '';
			for (;;) {
				const { value, done } = await r.read();
				if (done) return;
				buf += value.replace(/\r/g, '');
				for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
					const block = buf.slice(0, i);
					buf = buf.slice(i + 2);
					if (!/^event: event$/m.test(block)) continue;
					w.Events++;
					if (!/"state":/.test(block)) w.Stateless++;
				}
			}
		})().catch(() => {});
		return new Response(page, { status: res.status, statusText: res.statusText, headers: res.headers });
	};
})()`

// wire is window.uiWire.
type wire struct{ Gets, Events, Stateless int }

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// js is s as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// await waits, under ctx's deadline, until the expression is true in the
// page.
func await(ctx context.Context, t *testing.T, what, expr string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(0), chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		status, _ := chromedp.Run(context.WithoutCancel(ctx), chromedp.Evaluate[string](`document.getElementById('status').textContent`))
		t.Fatalf("waiting for %s: %v (the page's status: %q)", what, err, status)
	}
}

// openTimeline selects breaker's name and waits until its timeline,
// read from the event log, shows a transition reading want.
func openTimeline(ctx context.Context, t *testing.T, breaker, want string) {
	t.Helper()
	must(t, "select "+breaker, chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`[...document.querySelectorAll('#breakers button.name')].find(b => b.dataset.breaker === %s).click()`, js(breaker)))))
	await(ctx, t, "the timeline of "+breaker, fmt.Sprintf(`document.getElementById('timeline-name').textContent === %s &&
		[...document.querySelectorAll('#timeline tbody tr')].some(tr => tr.cells.length > 2 && tr.cells[2].textContent === %s)`, js(breaker), js(want)))
}

// signIn connects the page with token and waits until its stream is live.
func signIn(ctx context.Context, t *testing.T, token string) {
	t.Helper()
	must(t, "sign in", chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("connect"))))
	await(ctx, t, "the stream to be live", `document.getElementById('status').dataset.state === 'live'`)
}

// submitForce sends the page's Force form: open, reason, a 10 minute TTL.
func submitForce(ctx context.Context, t *testing.T, breaker, reason string) {
	t.Helper()
	must(t, "fill in Force", chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`document.getElementById('force-result').textContent = ''; delete document.getElementById('force-result').dataset.ok`),
		chromedp.SetValue(chromedp.ID("force-breaker"), breaker),
		chromedp.SetValue(chromedp.ID("force-mode"), "FORCE_MODE_OPEN"),
		chromedp.SetValue(chromedp.ID("force-reason"), reason),
		chromedp.SetValue(chromedp.ID("force-ttl"), "10"),
		chromedp.Click(chromedp.ID("force-submit"))))
}

// screenshot writes the page as a PNG to BREAKERD_UI_SCREENSHOT, if set
// (docs/status-page.png is one).
func screenshot(ctx context.Context, t *testing.T) {
	path := os.Getenv("BREAKERD_UI_SCREENSHOT")
	if path == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must(t, "screenshot", err)
	must(t, "write the screenshot", os.WriteFile(path, png, 0o644))
}

// newBrowser starts headless Chromium: no sandbox (CI runs as root), no
// background networking, a fresh profile.
func newBrowser(ctx context.Context, t *testing.T, path string) (context.Context, func()) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.Flag("disable-background-networking", true),
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	return bctx, func() { cancelBrowser(); cancelAlloc() }
}

// watchConsole collects the page's uncaught exceptions and the browser's
// security errors (a Content-Security-Policy refusal): the page must have
// none.
func watchConsole(ctx context.Context) func() []string {
	var mu sync.Mutex
	var seen []string
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || (m.Type == chromedp.ConsoleError && m.Source == "security") {
				mu.Lock()
				seen = append(seen, m.String())
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// daemon is a breakerd process with tokens and the HTTP listener.
type daemon struct {
	url string
}

// startDaemon runs breakerd (BREAKERD_BIN, or built from this tree) with
// an embedded Redis, a price on the search:* breakers' calls and, with
// tokens, an operator token (alice) and a worker token (pool, workers
// w-*), until the test ends.
func startDaemon(ctx context.Context, t *testing.T, tokens bool) *daemon {
	t.Helper()
	dir := t.TempDir()
	bin := os.Getenv("BREAKERD_BIN")
	if bin == "" {
		bin = filepath.Join(dir, "breakerd")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/breakerd")
		build.Dir = filepath.Join("..", "..", "..")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/breakerd: %v\n%s", err, out)
		}
	}
	policy := filepath.Join(dir, "policy.yaml")
	must(t, "write the policy", os.WriteFile(policy, []byte("breakers:\n"+
		"  - {match: \"search:*\", cost_per_call: {amount: 0.12, currency: USD}}\n"), 0o600))
	args := []string{"--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--config", policy, "--log-format", "json"}
	if tokens {
		file := filepath.Join(dir, "tokens.yaml")
		must(t, "write tokens", os.WriteFile(file, []byte("tokens:\n"+
			"  - {name: alice, role: operator, token: "+operatorToken+"}\n"+
			"  - {name: pool, role: worker, token: "+workerToken+", workers: [w-*]}\n"), 0o600))
		args = append(args, "--tokens", file)
	}
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	must(t, "stderr pipe", err)
	must(t, "start breakerd", cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving the HTTP/JSON API" {
				addr <- line.Addr
			}
		}
	}()
	select {
	case a := <-addr:
		return &daemon{url: a}
	case <-ctx.Done():
		t.Fatalf("breakerd did not report its HTTP listener: %v", ctx.Err())
	}
	return nil
}

// call sends one RPC with token and decodes its answer into out.
func (d *daemon) call(t *testing.T, method, token string, in, out any) {
	t.Helper()
	body, err := json.Marshal(in)
	must(t, "marshal "+method, err)
	req, err := http.NewRequest(http.MethodPost, d.url+"/breakerd.v1.BreakerService/"+method, bytes.NewReader(body))
	must(t, method, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	must(t, method, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%s %s = %d %s", method, body, res.StatusCode, b)
	}
	must(t, "decode "+method, json.Unmarshal(b, out))
}

// state is the part of a BreakerState the test reads.
type state struct {
	State    string `json:"state"`
	ForcedBy string `json:"forced_by"`
}

func (d *daemon) state(t *testing.T, name string) state {
	t.Helper()
	var r struct{ State state }
	d.call(t, "Get", operatorToken, map[string]string{"breaker": name}, &r)
	return r.State
}

// suspect fails calls on name from worker alone until breakerd suspects
// it (the fleet's breaker stays closed).
func (d *daemon) suspect(t *testing.T, name, worker string) {
	t.Helper()
	for range 100 {
		d.fail(t, name, worker)
		var r struct {
			State struct {
				SuspectWorker string `json:"suspect_worker"`
			}
		}
		d.call(t, "Get", operatorToken, map[string]string{"breaker": name}, &r)
		if r.State.SuspectWorker == worker {
			return
		}
	}
	t.Fatalf("%s did not suspect %s after 100 failures from it alone", name, worker)
}

// deny asks Allow on name as worker and wants it refused.
func (d *daemon) deny(t *testing.T, name, worker string) {
	t.Helper()
	var a struct{ Decision string }
	d.call(t, "Allow", workerToken, map[string]string{"breaker": name, "worker_id": worker}, &a)
	if !strings.HasPrefix(a.Decision, "DECISION_DENIED") {
		t.Fatalf("Allow(%q) as %s = %s, want a denial", name, worker, a.Decision)
	}
}

// fail sends one failed call (a timeout) on name as worker.
func (d *daemon) fail(t *testing.T, name, worker string) {
	t.Helper()
	var a struct{ Ticket json.RawMessage }
	d.call(t, "Allow", workerToken, map[string]string{"breaker": name, "worker_id": worker}, &a)
	var r json.RawMessage
	d.call(t, "Record", workerToken, map[string]any{"breaker": name, "worker_id": worker, "ticket": a.Ticket, "outcome": "OUTCOME_TIMEOUT"}, &r)
}

// trip fails calls on name from two workers, w-1 and w-2 in turn, until
// it opens (the quorum is two workers; the threshold is the policy's).
func (d *daemon) trip(t *testing.T, name string) {
	t.Helper()
	for i := range 100 {
		d.fail(t, name, fmt.Sprintf("w-%d", i%2+1))
		if d.state(t, name).State == "STATE_OPEN" {
			return
		}
	}
	t.Fatalf("%s did not open after 100 failures from two workers", name)
}
