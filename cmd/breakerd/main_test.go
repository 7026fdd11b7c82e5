package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
)

// TestMain lets the test binary re-exec itself as breakerd.
func TestMain(m *testing.M) {
	if os.Getenv("BREAKERD_TEST_AS_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func daemonCmd(args ...string) (*exec.Cmd, *daemontest.Buffer) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "BREAKERD_TEST_AS_MAIN=1")
	out := &daemontest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	return cmd, out
}

// proc is breakerd running as its own process for one test.
type proc struct {
	cmd  *exec.Cmd
	out  *daemontest.Buffer
	done chan error
}

// startDaemon runs breakerd with args until stop, or until t ends.
func startDaemon(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd, out := daemonCmd(args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return p
}

// signal sends sig, failing t if it cannot.
func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// stop sends SIGTERM and fails t unless breakerd exits cleanly within 15s.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v; output:\n%s", err, p.out)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("breakerd did not stop after SIGTERM; output:\n%s", p.out)
	}
}

func TestBootsServesAndStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	addr := testredis.FreeAddr(t)
	p := startDaemon(t, "--listen", addr)
	out := p.out
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	until(t, "breakerd reporting SERVING", out, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && res.Status == healthpb.HealthCheckResponse_SERVING
	})
	p.stop(t)
	for _, want := range []string{"embedded in-memory Redis", "neither shared", "breakerd stopped"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

func TestRefusesToStartOnBadConfig(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(bad, []byte("breakers:\n  - match: \"web_*\"\n    min_workers: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", testredis.FreeAddr(t), "--config", bad}, "breakers[0].min_workers: must be at least 1"},
		{[]string{"--log-format", "xml"}, "--log-format"},
		{[]string{"--redis-url", "http://nope"}, "--redis-url"},
	} {
		cmd, out := daemonCmd(tc.args...)
		err := cmd.Run()
		if err == nil || !strings.Contains(out.String(), tc.want) {
			t.Errorf("breakerd %v: %v, output %q; want a failure naming %q", tc.args, err, out, tc.want)
		}
	}
}

func TestHelpVersionAndUsageErrors(t *testing.T) {
	t.Parallel()
	exit := func(err error) int {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	cmd, out := daemonCmd("--help")
	if code := exit(cmd.Run()); code != 0 {
		t.Fatalf("breakerd --help exited %d:\n%s", code, out)
	}
	for _, want := range []string{"Usage: breakerd [flags]", "--listen string", "(env BREAKERD_LISTEN)", "--redis-url", "(env BREAKERD_REDIS_URL)", "--version"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("breakerd --help lacks %q:\n%s", want, out)
		}
	}
	cmd, out = daemonCmd("--version")
	if code := exit(cmd.Run()); code != 0 || !strings.HasPrefix(out.String(), "breakerd ") || !strings.Contains(out.String(), "(commit ") {
		t.Errorf("breakerd --version exited %d: %q; want 0 and a version line", code, out)
	}
	for _, args := range [][]string{{"--bogus"}, {"-config", "x"}, {"--log-format", "xml"}, {"stray"}} {
		cmd, out := daemonCmd(args...)
		if code := exit(cmd.Run()); code != 2 || !strings.Contains(out.String(), "breakerd --help") {
			t.Errorf("breakerd %q exited %d:\n%s\nwant 2 (a usage error) and a pointer to --help", args, code, out)
		}
	}
}

func TestCheckConfigPrintsWarningsAndEffectivePolicies(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("good.yaml", "defaults:\n  threshold: 4\nbreakers:\n  - match: \"overlap:*\"\n    threshold: 3\n  - match: \"overlap:a*\"\n    threshold: 9\n")
	bad := file("bad.yaml", "breakers:\n  - match: \"web_*\"\n    min_workers: 0\n")
	exit := func(err error) int {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	// A listen address that Validate would refuse does not matter: the
	// check serves nothing.
	cmd, out := daemonCmd("--check-config", good, "--listen", "0.0.0.0:1", "overlap:abc", "crm")
	if code := exit(cmd.Run()); code != 0 {
		t.Fatalf("--check-config on a valid file exited %d:\n%s", code, out)
	}
	want := `warning: breakers[1] (match "overlap:a*") is shadowed by breakers[0] (match "overlap:*"), which matches first: its overrides never apply to "overlap:a*"
overlap:abc: breakers[0] (match "overlap:*")
  mode: consecutive
  threshold: 3
  rate_limit_trips: 3
  min_workers: 2
  bare_rate_limit_wait: 1m0s
  cooldown_base: 30s
  cooldown_cap: 15m0s
  jitter: 0.2
  probe_timeout: 30s
  pause_ttl: 1h0m0s
  alternatives: []
  shadow: false
  count_unrecognised: false
crm: defaults
  mode: consecutive
  threshold: 4
`
	if !strings.HasPrefix(out.String(), want) || !strings.HasSuffix(out.String(), good+": ok, 1 warning\n") {
		t.Errorf("--check-config output:\n%s\nwant it to start with:\n%s", out, want)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--check-config", bad}, 1, "breakers[0].min_workers: must be at least 1"},
		{[]string{"--check-config", filepath.Join(dir, "missing.yaml")}, 1, "missing.yaml"},
		{[]string{"--check-config", good, " padded"}, 1, "NAME[0]: must not start or end with white space"},
		{[]string{"overlap:abc"}, 2, "NAME arguments go with --check-config"},
	} {
		cmd, out := daemonCmd(tc.args...)
		if code := exit(cmd.Run()); code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("breakerd %q exited %d:\n%s\nwant %d and %q", tc.args, code, out, tc.code, tc.want)
		}
	}
}

// --check-config names a breaker's open-fraction group, warns about a
// shadowed group, and exits 1 naming a bad group's field.
func TestCheckConfigShowsGroups(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("good.yaml", "groups:\n  - {name: search, members: [\"search:news\", \"search:images\"], max_open_fraction: 0.5}\n  - {name: web, members: [\"search:web\"], max_open_fraction: 0.2}\n")
	cmd, out := daemonCmd("--check-config", good, "search:news", "crm")
	if err := cmd.Run(); err != nil {
		t.Fatalf("--check-config on a valid file: %v\n%s", err, out)
	}
	for _, want := range []string{
		`  group: search (2 members, max_open_fraction: 0.5)`,
		good + ": ok\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--check-config output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out.String(), "  group:") != 1 {
		t.Errorf("--check-config shows a group for a breaker in none (crm):\n%s", out)
	}
	bad := file("bad.yaml", "groups:\n  - {name: search, members: [\"search:web\"], max_open_fraction: 0}\n")
	cmd, out = daemonCmd("--check-config", bad)
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(out.String(), "groups[0].max_open_fraction: must be in (0, 1]") {
		t.Errorf("--check-config on a bad group: %v\n%s\nwant exit 1 naming groups[0].max_open_fraction", err, out)
	}
}

// TestServesHTTPJSONBesideGRPC: with --http-listen the same daemon answers
// HTTP/JSON (health, an Allow) and stops cleanly on SIGTERM.
func TestServesHTTPJSONBesideGRPC(t *testing.T) {
	t.Parallel()
	httpAddr := testredis.FreeAddr(t)
	p := startDaemon(t, "--listen", testredis.FreeAddr(t), "--http-listen", httpAddr)
	awaitHealthy(t, p, httpAddr)
	res, err := http.Post("http://"+httpAddr+"/breakerd.v1.BreakerService/Allow", "application/json",
		strings.NewReader(`{"breaker":"web_search","worker_id":"w1"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), `"decision":"DECISION_ALLOWED"`) {
		t.Errorf("Allow over HTTP = %d %s, want 200 DECISION_ALLOWED", res.StatusCode, b)
	}
	p.stop(t)
	if !strings.Contains(p.out.String(), "serving the HTTP/JSON API") {
		t.Errorf("log lacks the HTTP listener:\n%s", p.out)
	}
}
