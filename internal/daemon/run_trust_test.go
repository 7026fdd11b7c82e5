package daemon

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/tests/daemontest"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/hooks"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestRunWithTokensAndHooks boots the assembled daemon with --tokens and
// --hooks and checks both are in force: calls need a token, and an
// operator's Force reaches the webhook, signed.
const hookSecret = "s3-0123456789abcdef0123456789abcdef"

func TestRunWithTokensAndHooks(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var got []*http.Request
	var bodies [][]byte
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r), append(bodies, b)
		mu.Unlock()
	}))
	t.Cleanup(hook.Close) // after the daemon stops
	write := func(name, body string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	const opToken, wToken = "operator-token-0123456789", "worker-token-0123456789"
	cfg := Config{
		Listen: testredis.FreeAddr(t), EventsMaxLen: 100, EventRetention: time.Hour,
		ShutdownTimeout: time.Second, HealthInterval: time.Second, LogFormat: "text",
		TokensFile: write("tokens.yaml", "tokens:\n  - {name: alice, role: operator, token: "+opToken+"}\n  - {name: w1, role: worker, token: "+wToken+", workers: [w1]}\n"),
		HooksFile:  write("hooks.yaml", "hooks:\n  - {name: oncall, url: \""+hook.URL+"\", events: [forced], secret: "+hookSecret+"}\n"),
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs daemontest.Buffer
	addr := startRun(t, cfg, slog.New(slog.NewTextHandler(&logs, nil)), &logs)
	dial := func(opts ...client.Option) pb.BreakerServiceClient {
		c, err := client.Dial(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c.API()
	}
	bg := context.Background()
	if _, err := dial().Get(bg, &pb.GetRequest{Breaker: "x"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Get without a token: %v, want Unauthenticated", err)
	}
	if _, err := dial(client.WithToken(wToken)).Allow(bg, &pb.AllowRequest{Breaker: "x", WorkerId: "w2"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("w1's token as w2: %v, want PermissionDenied", err)
	}
	if _, err := dial(client.WithToken(opToken)).Force(bg, &pb.ForceRequest{Breaker: "x", Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "drill"}); err != nil {
		t.Fatalf("operator Force: %v", err)
	}
	daemontest.Eventually(t, "the forced event reaching the hook", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Header.Get(hooks.HeaderEvent) != "forced" || client.VerifyWebhook(hookSecret, got[0].Header, bodies[0], time.Now()) != nil || !bytes.Contains(bodies[0], []byte(`"actor":"alice"`)) {
		t.Errorf("hook got %d requests, first %v %s; want one signed forced event by alice", len(got), got[0].Header, bodies[0])
	}
	for _, want := range []string{"auth on", "alert hooks on", "token=alice"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), opToken) || strings.Contains(logs.String(), wToken) {
		t.Errorf("a token reached the log")
	}
}
