package main

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/tests/testredis"
)

// docsAddr is the address docs/http-api.md's curl lines call; the test
// points them at its own daemon.
const docsAddr = "127.0.0.1:7071"

// docsLastID is the Last-Event-ID the page's resume line shows; the test
// puts the id its own stream last showed in its place.
const docsLastID = "web_search/1767225600000-0"

// curlBlocks returns the ```sh blocks of the page that run curl, in order.
func curlBlocks(t *testing.T, page string) []string {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(m[1], "curl ") {
			blocks = append(blocks, m[1])
		}
	}
	return blocks
}

// sseFollower is a curl following a stream in the background.
type sseFollower struct {
	cancel context.CancelFunc
	mu     sync.Mutex
	out    strings.Builder
	done   chan struct{}
}

func (f *sseFollower) text() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.out.String()
}

// follow starts script (a streaming curl) and collects its output.
func follow(t *testing.T, script string) *sseFollower {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &sseFollower{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			f.mu.Lock()
			f.out.WriteString(sc.Text() + "\n")
			f.mu.Unlock()
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() { cancel(); <-f.done })
	return f
}

// await waits until the stream's output matches re, failing t if the
// stream ends first or a minute passes (a stuck stream, not a margin).
func (f *sseFollower) await(t *testing.T, what string, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if m := re.FindStringSubmatch(f.text()); m != nil {
			return m
		}
		select {
		case <-f.done:
			t.Fatalf("the stream ended before %s; it showed:\n%s", what, f.text())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after a minute; the stream showed:\n%s", what, f.text())
		}
		time.Sleep(20 * time.Millisecond) // polling a pipe, not waiting out a cooldown
	}
}

// TestHTTPDocsCurlLinesRun runs every curl line of docs/http-api.md, in
// order, against breakerd started with --http-listen (the page's own
// command): the breaker trips from two workers with raw evidence, denies
// with a tool_result and deny_until_ms, a stream follows it, drops, and
// resumes with Last-Event-ID to receive the event it missed.
func TestHTTPDocsCurlLinesRun(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed: scripts/test.sh installs it (the need map)")
	}
	httpAddr := testredis.FreeAddr(t)
	p := startDaemon(t, "--listen", testredis.FreeAddr(t), "--http-listen", httpAddr)
	awaitHealthy(t, p, httpAddr)

	// What each non-streaming block's output shows, in the page's order.
	want := [][]string{
		{`"decision":"DECISION_ALLOWED"`},
		{`"state":"STATE_OPEN"`, `"classified_as":"OUTCOME_SERVER_ERROR"`},
		{`"decision":"DECISION_DENIED_OPEN"`, `"tool_result":"{`, `"deny_until_ms":"1`},
		{`"classified_as":"OUTCOME_RATE_LIMITED"`},
		{`"state":"STATE_OPEN"`},
		{`"state":"STATE_FORCED_CLOSED"`},
		{`"state":"STATE_FORCED_OPEN"`},
	}
	var followed *sseFollower
	lastID := ""
	step := 0
	for _, block := range curlBlocks(t, "../../docs/http-api.md") {
		script := strings.ReplaceAll(block, docsAddr, httpAddr)
		switch {
		case strings.Contains(block, "/v1/watch") && strings.Contains(block, "Last-Event-ID"):
			if lastID == "" {
				t.Fatal("the page resumes a stream before one showed an id")
			}
			resumed := follow(t, strings.ReplaceAll(script, docsLastID, lastID))
			m := resumed.await(t, "the missed event", regexp.MustCompile(`id: (web_search/\S+)\nevent: event\ndata: .*"to":"STATE_FORCED_OPEN"`))
			if m[1] == lastID || strings.Contains(resumed.text(), "id: "+lastID+"\n") {
				t.Errorf("the resumed stream sent %s again, the event it had:\n%s", lastID, resumed.text())
			}
		case strings.Contains(block, "/v1/watch"):
			followed = follow(t, script)
			followed.await(t, "the snapshot", regexp.MustCompile(`event: snapshot\ndata: .*"breaker":"web_search"`))
		default:
			if step >= len(want) {
				t.Fatalf("the page has more curl blocks than this test knows (%d); add what block %d shows:\n%s", len(want), step+1, block)
			}
			out, err := exec.Command("bash", "-c", script).CombinedOutput()
			if err != nil {
				t.Fatalf("block %d: %v\n%s\n%s", step+1, err, block, out)
			}
			for _, w := range want[step] {
				if !strings.Contains(string(out), w) {
					t.Errorf("block %d:\n%s\nanswered:\n%s\nwant it to contain %s", step+1, block, out, w)
				}
			}
			step++
			if followed != nil && strings.Contains(block, "FORCE_MODE_CLOSED") {
				m := followed.await(t, "the close", regexp.MustCompile(`id: (web_search/\S+)\nevent: event\ndata: .*"to":"STATE_FORCED_CLOSED"`))
				lastID = m[1]
				followed.cancel() // the drop
				<-followed.done
			}
		}
	}
	if step != len(want) {
		t.Errorf("ran %d non-streaming curl blocks, the test expects %d: the page and the test disagree", step, len(want))
	}
	p.stop(t)
}

// awaitHealthy polls GET /healthz until the daemon answers 200.
func awaitHealthy(t *testing.T, p *proc, httpAddr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := http.Get("http://" + httpAddr + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /healthz never answered 200 (last: %v); output:\n%s", err, p.out)
		}
		time.Sleep(50 * time.Millisecond) // polling for a port, not waiting out a cooldown
	}
}
