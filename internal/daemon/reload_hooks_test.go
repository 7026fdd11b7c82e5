package daemon

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestHooksReloadSwapsTheHooks: a hook replaced in the file stops
// receiving and its replacement starts, without a restart; a bad file is
// rejected and the hooks in force keep delivering.
func TestHooksReloadSwapsTheHooks(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]int{}
	receiver := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			mu.Lock()
			got[name]++
			mu.Unlock()
		}))
		t.Cleanup(s.Close)
		return s
	}
	count := func(name string) int { mu.Lock(); defer mu.Unlock(); return got[name] }
	a, b := receiver("a"), receiver("b")
	path := filepath.Join(t.TempDir(), "hooks.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path+".new", []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	secret := strings.Repeat("k", 40)
	hook := func(name, url string) string {
		return "hooks:\n  - {name: " + name + ", url: \"" + url + "\", events: [forced], secret: " + secret + "}\n"
	}
	write(hook("a", a.URL))
	cfg := baseConfig(t)
	cfg.HooksFile, cfg.ConfigPoll = path, 10*time.Millisecond
	var logs daemontest.Buffer
	addr := serveConfig(t, cfg, &logs)
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	force := func(mode pb.ForceMode) {
		t.Helper()
		if _, err := c.API().Force(context.Background(), &pb.ForceRequest{Breaker: "hooked", Mode: mode, Reason: "drill"}); err != nil {
			t.Fatal(err)
		}
	}
	force(pb.ForceMode_FORCE_MODE_OPEN)
	daemontest.Eventually(t, "hook a's delivery", func() bool { return count("a") == 1 })

	write(hook("b", b.URL))
	daemontest.Eventually(t, "the hooks reloaded", func() bool { return strings.Contains(logs.String(), "hooks reloaded") })
	// Hook b's consumer groups start when its dispatcher runs, a moment
	// after the reload: force until one of its events reaches it.
	modes := []pb.ForceMode{pb.ForceMode_FORCE_MODE_AUTO, pb.ForceMode_FORCE_MODE_OPEN}
	for i := 0; count("b") == 0; i++ {
		if i == 200 {
			t.Fatal("hook b never received an event")
		}
		force(modes[i%2])
		for j := 0; j < 20 && count("b") == 0; j++ {
			time.Sleep(5 * time.Millisecond) // another goroutine's delivery, not a cooldown
		}
	}

	write("hooks:\n  - {name: c, url: \"ftp://nope\", events: [forced], secret: " + secret + "}\n")
	daemontest.Eventually(t, "the bad file rejected", func() bool { return strings.Contains(logs.String(), "hooks reload rejected") })
	before := count("b")
	force(pb.ForceMode_FORCE_MODE_AUTO)
	force(pb.ForceMode_FORCE_MODE_OPEN)
	daemontest.Eventually(t, "hook b's delivery after the rejection", func() bool { return count("b") > before })
	if n := count("a"); n != 1 {
		t.Errorf("hook a, taken out of the file, got %d events, want only the first", n)
	}
}

// TestOneRedisSubscriptionPerDaemon: the hooks dispatcher hears new
// events through the daemon's event hub, so a daemon with hooks holds one
// Redis subscription to the event channel, not one per reader.
func TestOneRedisSubscriptionPerDaemon(t *testing.T) {
	mr := miniredis.RunT(t)
	delivered := make(chan struct{}, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		delivered <- struct{}{}
	}))
	t.Cleanup(hook.Close)
	path := filepath.Join(t.TempDir(), "hooks.yaml")
	body := "hooks:\n  - {name: a, url: \"" + hook.URL + "\", events: [forced], secret: " + strings.Repeat("k", 40) + "}\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(t)
	cfg.RedisURL, cfg.HooksFile = "redis://"+mr.Addr(), path
	c, err := client.Dial(serveConfig(t, cfg, &daemontest.Buffer{}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.API().Force(context.Background(), &pb.ForceRequest{Breaker: "hooked", Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "drill"}); err != nil {
		t.Fatal(err)
	}
	// A delivery means the dispatcher heard the event: every reader runs.
	daemontest.Eventually(t, "the hook's delivery", func() bool { return len(delivered) > 0 })
	channel := store.DefaultChannel + ":db0" // database 0 of redis://host:port
	if n := mr.PubSubNumSub(channel)[channel]; n != 1 {
		t.Errorf("the daemon holds %d subscriptions to %s, want 1 (channels: %v)", n, channel, mr.PubSubChannels(""))
	}
}
