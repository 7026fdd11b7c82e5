package daemon

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/secretfile"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// serveConfig runs Run with cfg until the test ends and returns its address.
func serveConfig(t *testing.T, cfg Config, logs *daemontest.Buffer) string {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return startRun(t, cfg, slog.New(slog.NewTextHandler(logs, nil)), logs)
}

// startRun runs Run with cfg, logging to log, until the test ends (and
// fails the test if Run then returns an error), and returns its gRPC
// address once it listens. logs, the buffer log writes to, is shown if
// Run fails to start.
func startRun(t *testing.T, cfg Config, log *slog.Logger, logs *daemontest.Buffer) string {
	t.Helper()
	if cfg.RedisDecisionTimeout == 0 { // on a busy machine a healthy Redis can be slower than the default bound
		cfg.RedisDecisionTimeout = store.LaxDecisionTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, log, func(a net.Addr) { ready <- a }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case a := <-ready:
		return a.String()
	case err := <-done:
		t.Fatalf("Run: %v\n%s", err, logs.String())
	}
	return ""
}

func baseConfig(t *testing.T) Config {
	return Config{Listen: testredis.FreeAddr(t), EventsMaxLen: 100, EventRetention: time.Hour,
		ShutdownTimeout: time.Second, HealthInterval: time.Second, LogFormat: "text"}
}

// TestTokensReloadRemovesATokenAndKeepsTheOldFileOnABadOne: a token taken
// out of the file stops working once the file is reloaded; a bad file is
// rejected and the tokens in force stay.
func TestTokensReloadRemovesATokenAndKeepsTheOldFileOnABadOne(t *testing.T) {
	const opToken, w1Token, w2Token = "operator-token-0123456789", "w1-token-0123456789ab", "w2-token-0123456789ab"
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	write := func(body string) {
		t.Helper()
		// Written beside and renamed, as an editor or a ConfigMap does.
		if err := os.WriteFile(path+".new", []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	op := "  - {name: alice, role: operator, token: " + opToken + "}\n"
	w1 := "  - {name: w1, role: worker, token: " + w1Token + ", workers: [w1]}\n"
	w2 := "  - {name: w2, role: worker, token: " + w2Token + ", workers: [w2]}\n"
	write("tokens:\n" + op + w1 + w2)
	cfg := baseConfig(t)
	cfg.TokensFile, cfg.ConfigPoll = path, 10*time.Millisecond
	var logs daemontest.Buffer
	addr := serveConfig(t, cfg, &logs)
	get := func(token string) error {
		c, err := client.Dial(addr, client.WithToken(token))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.API().Get(context.Background(), &pb.GetRequest{Breaker: "x"})
		return err
	}
	for _, tok := range []string{opToken, w1Token, w2Token} {
		if err := get(tok); err != nil {
			t.Fatalf("Get before the reload: %v", err)
		}
	}

	write("tokens:\n" + op + w1)
	daemontest.Eventually(t, "w2's token refused", func() bool { return status.Code(get(w2Token)) == codes.Unauthenticated })
	if err := get(w1Token); err != nil {
		t.Errorf("w1's token after the reload: %v", err)
	}

	write("tokens:\n  - {name: broken, role: admin, token: " + w2Token + "}\n")
	daemontest.Eventually(t, "the rejection logged", func() bool { return strings.Contains(logs.String(), "tokens reload rejected") })
	if err := get(w1Token); err != nil {
		t.Errorf("w1's token after a rejected file: %v", err)
	}
	if status.Code(get(w2Token)) != codes.Unauthenticated {
		t.Errorf("the rejected file's token was accepted")
	}
	if !strings.Contains(logs.String(), "tokens[0].role") {
		t.Errorf("the rejection does not name the field:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), w2Token) {
		t.Errorf("a token reached the log")
	}
}

// TestSecretFilesOthersCanWriteAreRefused: a tokens or hooks file that its
// group or others may write stops the daemon at start (and a reload
// keeps the old file); a world-readable one is served with a warning.
func TestSecretFilesOthersCanWriteAreRefused(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte("tokens:\n  - {name: alice, role: operator, token: operator-token-0123456789}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hooksFile := filepath.Join(dir, "hooks.yaml")
	if err := os.WriteFile(hooksFile, []byte("hooks: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file string
		set  func(*Config)
	}{
		{tokens, func(c *Config) { c.TokensFile = tokens }},
		{hooksFile, func(c *Config) { c.HooksFile = hooksFile }},
	} {
		if err := os.Chmod(c.file, 0o666); err != nil {
			t.Fatal(err)
		}
		cfg := baseConfig(t)
		c.set(&cfg)
		var logs daemontest.Buffer
		err := Run(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)), nil)
		if err == nil || !strings.Contains(err.Error(), secretfile.ErrWritable.Error()) || !strings.Contains(err.Error(), c.file) {
			t.Errorf("Run with a 0666 %s: %v, want a refusal naming the file", filepath.Base(c.file), err)
		}
		if err := os.Chmod(c.file, 0o644); err != nil {
			t.Fatal(err)
		}
		logs = daemontest.Buffer{}
		serveConfig(t, cfg, &logs)
		if !strings.Contains(logs.String(), "readable by every local user") {
			t.Errorf("no warning for a 0644 %s:\n%s", filepath.Base(c.file), logs.String())
		}
	}
}

// TestReadableWarningOncePerModeChange: the tokens and hooks files are
// read on every poll; their "readable by every local user" warning is
// logged once when a file becomes so, not on each poll, and again after
// it was fixed and then made readable once more.
func TestReadableWarningOncePerModeChange(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	hooksFile := filepath.Join(dir, "hooks.yaml")
	for file, body := range map[string]string{
		tokens:    "tokens:\n  - {name: alice, role: operator, token: operator-token-0123456789}\n",
		hooksFile: "hooks: []\n",
	} {
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var logs daemontest.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	cfg := baseConfig(t)
	cfg.TokensFile, cfg.HooksFile = tokens, hooksFile
	_, _, tr, err := trustOptions(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	_, hr, err := newDispatcher(cfg, rdb, store.New(rdb, store.Options{}), nil, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	warnings := func(flag string) int {
		return strings.Count(logs.String(), flag+" file is readable by every local user")
	}
	poll := func(n int) {
		for range n {
			for _, r := range []*fileReloader{tr, hr} {
				if err := r.reload(false, "file changed"); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	chmod := func(mode os.FileMode) {
		for _, f := range []string{tokens, hooksFile} {
			if err := os.Chmod(f, mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	poll(10)
	for _, flag := range []string{"--tokens", "--hooks"} {
		if got := warnings(flag); got != 1 {
			t.Errorf("%s warnings after start and 10 polls = %d, want 1", flag, got)
		}
	}
	chmod(0o600)
	poll(3)
	chmod(0o644)
	poll(3)
	for _, flag := range []string{"--tokens", "--hooks"} {
		if got := warnings(flag); got != 2 {
			t.Errorf("%s warnings after chmod 600, then 644 = %d, want 2", flag, got)
		}
	}
}
