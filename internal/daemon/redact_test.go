package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
)

func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://127.0.0.1:6379/0":                      "redis://127.0.0.1:6379/0",
		"redis://user:s3cret@redis:6379/1":              "redis://user:xxxxx@redis:6379/1",
		"rediss://:s3cret@redis:6380":                   "rediss://:xxxxx@redis:6380",
		"redis://user:s3cret@redis:6379/0?addr=r2:6379": "redis://user:xxxxx@redis:6379/0?addr=r2:6379",
		"redis://redis:6379/0?password=s3cret&db=1":     "redis://redis:6379/0?password=xxxxx&db=1",
		// Malformed: url.Parse refuses these, and they are what an error echoes.
		"redis://user:s3cret@redis:port/0": "redis://xxxxx@redis:port/0",
		"redis://u:s3%zzcret@host/0":       "redis://xxxxx@host/0",
	} {
		if got := RedactURL(raw); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", raw, got, want)
		}
	}
}

// TestBadRedisURLNeverEchoesThePassword: every way a --redis-url can be
// refused names the flag and never shows the password.
func TestBadRedisURLNeverEchoesThePassword(t *testing.T) {
	for _, raw := range []string{
		"redis://user:s3cretpw@redis:port/0",
		"redis://user:s3cretpw@redis:6379/notadb",
		"http://user:s3cretpw@redis:6379/0",
		"redis://u:s3cretpw%zz@host/0",
		"redis://redis:6379/0?password=s3cretpw&bogus=1",
	} {
		for _, cluster := range []bool{false, true} {
			var logs daemontest.Buffer
			_, _, _, err := connect(Config{RedisURL: raw, RedisCluster: cluster}, slog.New(slog.NewTextHandler(&logs, nil)))
			if err == nil {
				continue // some are valid as a cluster URL; none reaches Redis here
			}
			if strings.Contains(err.Error(), "s3cretpw") || strings.Contains(logs.String(), "s3cretpw") || !strings.Contains(err.Error(), "--redis-url") {
				t.Errorf("connect(%q, cluster %v): %v; log %q; want an error naming --redis-url without the password", raw, cluster, err, logs.String())
			}
		}
	}
}

func TestRedisPasswordFile(t *testing.T) {
	m := miniredis.RunT(t)
	m.RequireAuth("from-the-file")
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	if err := os.WriteFile(file, []byte("from-the-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs daemontest.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	rdb, _, closeRedis, err := connect(Config{RedisURL: "redis://:wrong-one@" + m.Addr() + "/0", RedisPasswordFile: file}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer closeRedis()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Errorf("PING with the file's password: %v", err)
	}
	if !strings.Contains(logs.String(), "--redis-password-file wins") || strings.Contains(logs.String(), "wrong-one") || strings.Contains(logs.String(), "from-the-file") {
		t.Errorf("log:\n%s\nwant a note that the file wins, and no password", logs.String())
	}
	if err := os.Chmod(file, 0o626); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := connect(Config{RedisURL: "redis://" + m.Addr(), RedisPasswordFile: file}, log); err == nil || !strings.Contains(err.Error(), "--redis-password-file") {
		t.Errorf("a group-writable password file: %v, want a refusal", err)
	}
}

// TestEmbeddedRedisNeedsItsPassword: another local user reaching the
// embedded Redis's port gets nothing without the password, which is in
// no log line.
func TestEmbeddedRedisNeedsItsPassword(t *testing.T) {
	var logs daemontest.Buffer
	rdb, _, closeRedis, err := connect(Config{}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer closeRedis()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("the daemon's own PING: %v", err)
	}
	addr := rdb.(*redis.Client).Options().Addr
	pw := rdb.(*redis.Client).Options().Password
	if !strings.HasPrefix(addr, "127.0.0.1:") || len(pw) < 32 {
		t.Fatalf("embedded Redis at %s with a %d-byte password, want loopback and at least 32", addr, len(pw))
	}
	other := redis.NewClient(&redis.Options{Addr: addr})
	defer other.Close()
	if err := other.Set(ctx, "x", "1", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("SET without the password: %v, want NOAUTH", err)
	}
	if strings.Contains(logs.String(), pw) || !regexp.MustCompile(`random password`).MatchString(logs.String()) {
		t.Errorf("log:\n%s\nwant the random password mentioned, never shown", logs.String())
	}
}
