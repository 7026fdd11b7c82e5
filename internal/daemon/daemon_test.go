package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/cli"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"

	"github.com/alicebob/miniredis/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestHealthFollowsRedis: with --redis-outage unavailable, health goes
// NOT_SERVING while Redis is away; with the default (memory) the daemon
// stays SERVING and answers from memory, degraded, until Redis is back.
func TestHealthFollowsRedis(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"unavailable", "memory"} {
		t.Run(mode, func(t *testing.T) { testHealthFollowsRedis(t, mode) })
	}
}

func testHealthFollowsRedis(t *testing.T, mode string) {
	m := miniredis.RunT(t)
	cfg, err := ParseConfig([]string{"--listen", "127.0.0.1:0", "--redis-url", "redis://" + m.Addr(), "--health-interval", "100ms",
		"--redis-outage", mode}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	logs := &daemontest.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil)), func(a net.Addr) { ready <- a })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	conn, err := grpc.NewClient((<-ready).String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		// Both names, the server's and the service's, follow Redis.
		for _, service := range []string{"", "breakerd.v1.BreakerService"} {
			daemontest.Eventually(t, fmt.Sprintf("health of %q becoming %v", service, want), func() bool {
				res, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
				return err == nil && res.Status == want
			})
		}
	}
	waitFor(healthpb.HealthCheckResponse_SERVING)
	api := pb.NewBreakerServiceClient(conn)
	allow := func() (*pb.AllowResponse, error) {
		return api.Allow(context.Background(), &pb.AllowRequest{Breaker: "search", WorkerId: "w1"})
	}
	if mode == "memory" { // memory answers once a listing seeded it
		daemontest.Eventually(t, "the daemon to list its breakers", func() bool { return strings.Contains(logs.String(), store.SeededLog) })
	}
	testredis.Stop(m)
	if mode == "unavailable" {
		waitFor(healthpb.HealthCheckResponse_NOT_SERVING)
		if _, err := allow(); status.Code(err) != codes.Unavailable {
			t.Errorf("Allow with Redis away = %v, want Unavailable", err)
		}
	} else {
		// The first Allow finds Redis gone and is answered from memory; on
		// a busy host the decision bound may pass before the refusal
		// comes back, and a call gets Unavailable first.
		daemontest.Eventually(t, "an Allow answered from memory with Redis away", func() bool {
			a, err := allow()
			if err != nil && status.Code(err) != codes.Unavailable {
				t.Fatalf("Allow with Redis away: %v; want a degraded ALLOWED or Unavailable", err)
			}
			if err == nil && (!a.Degraded || a.Decision != pb.Decision_DECISION_ALLOWED) {
				t.Fatalf("Allow with Redis away = %v (degraded %v); want a degraded ALLOWED", a.Decision, a.Degraded)
			}
			return err == nil
		})
		waitFor(healthpb.HealthCheckResponse_SERVING)
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(healthpb.HealthCheckResponse_SERVING)
	daemontest.Eventually(t, "an Allow answered by Redis after it came back", func() bool {
		a, err := allow()
		return err == nil && !a.Degraded
	})
}

func TestParseConfigFromEnvAndFlags(t *testing.T) {
	env := map[string]string{"BREAKERD_LISTEN": "127.0.0.1:9000", "BREAKERD_DRAIN_DELAY": "3s", "BREAKERD_EVENTS_MAX_LEN": "50"}
	c, err := ParseConfig([]string{"--drain-delay", "1s"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:9000" || c.DrainDelay != time.Second || c.EventsMaxLen != 50 {
		t.Errorf("config = %+v; want listen from env, drain delay from the flag, max len from env", c)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--events-max-len", "0"}, nil, "--events-max-len"},
		{nil, map[string]string{"BREAKERD_DRAIN_DELAY": "soon"}, "BREAKERD_DRAIN_DELAY"},
		{nil, map[string]string{"BREAKERD_EVENTS_MAX_LEN": "many"}, "BREAKERD_EVENTS_MAX_LEN"},
		{[]string{"--shutdown-timeout", "0s"}, nil, "--shutdown-timeout"},
		{[]string{"stray"}, nil, "unexpected argument"},
	} {
		_, err := ParseConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%v, %v) = %v, want an error naming %s", tc.args, tc.env, err, tc.want)
		}
	}
}

func TestShutdownEndsWatchStreams(t *testing.T) {
	var logs daemontest.Buffer
	cfg, err := ParseConfig([]string{"--listen", "127.0.0.1:0", "--drain-delay", "50ms", "--shutdown-timeout", "30s"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)), func(a net.Addr) { ready <- a })
	}()
	conn, err := grpc.NewClient((<-ready).String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := pb.NewBreakerServiceClient(conn).Watch(context.Background(), &pb.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := nextEvent(stream, nil); status.Code(err) != codes.Unavailable {
		t.Errorf("Watch during shutdown ended with %v, want Unavailable", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if strings.Contains(logs.String(), "timed out") {
		t.Errorf("shutdown waited out its backstop for an open Watch:\n%s", logs.String())
	}
}

// TestFlagsMatchTheDocs holds docs/configuration.md's flag table to the
// flag table: the same flags, each with its environment variable.
func TestFlagsMatchTheDocs(t *testing.T) {
	readme, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Daemon configuration\n")
	if !ok {
		t.Fatal(`docs/configuration.md has no "## Daemon configuration" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	documented := map[string]string{} // flag -> env
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`--") {
			continue
		}
		flags, envs := strings.Split(cells[1], ","), strings.Split(cells[2], ",")
		if len(flags) != len(envs) {
			t.Errorf("docs/configuration.md row %q: %d flags, %d variables", line, len(flags), len(envs))
			continue
		}
		for i := range flags {
			documented[strings.Trim(flags[i], " `-")] = strings.Trim(envs[i], " `")
		}
	}
	var c Config
	for _, f := range c.Flags() {
		want := cli.EnvName(EnvPrefix, f.Name)
		if f.Env == "-" { // a flag that reads no variable
			want = "(none)"
		}
		if got, ok := documented[f.Name]; !ok {
			t.Errorf("docs/configuration.md's table lacks --%s (%s)", f.Name, want)
		} else if got != want {
			t.Errorf("docs/configuration.md gives --%s the variable %s, want %s", f.Name, got, want)
		}
		delete(documented, f.Name)
	}
	for name := range documented {
		t.Errorf("docs/configuration.md documents --%s, which breakerd does not have", name)
	}
}

func TestLogsWriteDurationsAsStringsAndRedisLinesOnce(t *testing.T) {
	var out strings.Builder
	log := NewLogger(Config{LogFormat: "json"}, &out)
	log.Info("force", "ttl", time.Minute, "took", 1500*time.Microsecond)
	RedisLogger(log).Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 5, "refused")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 log lines, got:\n%s", out.String())
	}
	for _, want := range []string{`"ttl":"1m0s"`, `"took":"1.5ms"`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log line lacks %s: %s", want, lines[0])
		}
	}
	if want := `"msg":"redis: connection pool: failed to dial after 5 attempts: refused","component":"go-redis"`; !strings.Contains(lines[1], want) {
		t.Errorf("go-redis line = %s, want it to contain %s", lines[1], want)
	}
	if strings.Count(lines[1], "redis: ") != 1 {
		t.Errorf("go-redis line repeats its prefix: %s", lines[1])
	}
}
