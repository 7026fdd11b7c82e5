package mcpgw

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
)

// needLandlock skips a test of the sandbox itself where the kernel cannot
// give it, saying why.
func needLandlock(t *testing.T) {
	t.Helper()
	if _, err := LandlockABI(); err != nil {
		t.Skipf("no upstream sandbox on this machine: %v", err)
	}
}

// snoopLines runs the snoop tool of a fake upstream started by a gateway
// with o and returns its lines by what they read.
func snoopLines(t *testing.T, o Options, up Upstream) map[string]string {
	t.Helper()
	b := testredis.Mini(t)
	d := daemontest.Start(t, b, noJitter())
	o.Conn, o.WorkerID, o.Config = dialDaemon(t, d), "gw-1", Config{Upstreams: []Upstream{up}}
	g := startGatewayWith(t, b, o)
	a := connectAgent(t, g)
	if res := a.call(t, "echo"); res.IsError || text(res) != "echo" {
		t.Fatalf("echo through the upstream = %q (isError %v), want echo", text(res), res.IsError)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(text(a.call(t, "snoop")), "\n") {
		what, got, _ := strings.Cut(l, ": ")
		lines[what] = got
	}
	return lines
}

// TestSecuritySandboxKeepsGatewayFilesAndProcFromUpstreams: a command
// upstream started by the gateway (as the gateway's user) cannot read the
// gateway's token and config files, nor /proc/<gateway pid>/cmdline (where
// --token-file names the file), nor another process's /proc; it still
// reads its own /proc/self, a file beside the denied ones, and answers
// MCP calls. With sandbox: false (and --sandbox off) it reads them all,
// which shows the test reads what it claims to. N5.
func TestSecuritySandboxKeepsGatewayFilesAndProcFromUpstreams(t *testing.T) {
	t.Parallel()
	needLandlock(t)
	dir := t.TempDir()
	token, cfg, beside := filepath.Join(dir, "token"), filepath.Join(dir, "gateway.yaml"), filepath.Join(dir, "notes")
	for _, f := range []string{token, cfg, beside} {
		if err := os.WriteFile(f, []byte("secret-of-"+filepath.Base(f)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	up := fakeCommand("snoop", DefaultTimeout)
	up.Env["SNOOP_FILES"] = token + "," + cfg + "," + beside
	up.Env["SNOOP_PID"] = strconv.Itoa(other.Process.Pid)
	off := false
	for _, tc := range []struct {
		name       string
		sandbox    *bool
		wantDenied bool
	}{{"sandboxed", nil, true}, {"sandbox false", &off, false}} {
		t.Run(tc.name, func(t *testing.T) {
			up.Sandbox = tc.sandbox
			lines := snoopLines(t, Options{Sandbox: SandboxOptions{Deny: []string{token, cfg}}}, up)
			for _, what := range []string{"gateway cmdline", "other cmdline", token, cfg} {
				denied := strings.Contains(lines[what], "permission denied")
				if denied != tc.wantDenied || (!denied && !strings.HasPrefix(lines[what], "read ")) {
					t.Errorf("upstream reading %s: %q; want denied %v", what, lines[what], tc.wantDenied)
				}
			}
			for _, what := range []string{"own status", beside} {
				if !strings.HasPrefix(lines[what], "read ") {
					t.Errorf("upstream reading %s: %q, want it read", what, lines[what])
				}
			}
		})
	}
}

// TestSandboxUnavailableIsNeverSilent: where the kernel has no Landlock,
// --sandbox auto starts the upstreams unconfined with a warning naming
// them and the risk, required refuses to start, and off warns too.
func TestSandboxUnavailableIsNeverSilent(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d := daemontest.Start(t, b, noJitter())
	noKernel := func() (int, error) { return 0, errors.New("this kernel has no Landlock") }
	for _, tc := range []struct {
		mode, wantLog, wantErr string
	}{
		{SandboxAuto, "SANDBOX UNAVAILABLE", ""},
		{"", "SANDBOX UNAVAILABLE", ""},
		{SandboxOff, "SANDBOX OFF", ""},
		{SandboxRequired, "", "sandbox: required, but this kernel has no Landlock"},
	} {
		t.Run("mode="+tc.mode, func(t *testing.T) {
			var logs bytes.Buffer
			g, err := New(context.Background(), Options{Conn: dialDaemon(t, d), WorkerID: "gw-1", Log: newLogger(&logs),
				Config:  Config{BreakerPrefix: b.Prefix + "mcp:", Upstreams: []Upstream{fakeCommand("echo", DefaultTimeout)}},
				Sandbox: SandboxOptions{Mode: tc.mode, probe: noKernel}})
			if g != nil {
				defer g.Close()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("New = %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), tc.wantLog) ||
				!strings.Contains(logs.String(), "token") || !strings.Contains(logs.String(), "upstreams=fake") {
				t.Errorf("start log = %q, want a warning %q naming the token risk and upstream fake", logs.String(), tc.wantLog)
			}
		})
	}
}

// TestSandboxLauncherRefusesToRunUnconfined: the launcher never execs a
// command it could not confine (bad arguments, or no Landlock).
func TestSandboxLauncherRefusesToRunUnconfined(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--deny", "relative", "--", "true"}, {"--deny", "/x"}, {"--"}} {
		if err := ExecSandboxed(args); err == nil {
			t.Errorf("ExecSandboxed(%q) = nil, want an error", args)
		}
	}
	if runtime.GOOS != "linux" {
		if err := ExecSandboxed([]string{"--", "true"}); err == nil {
			t.Error("ExecSandboxed off Linux = nil, want an error")
		}
	}
}

// TestRunAsAnotherUser: an upstream with run_as runs as that user and
// group (in the sandbox: the launcher is this test binary, copied where
// that user may run it), and cannot read a 0600 file of the gateway's
// user beside its own program. Needs root.
func TestRunAsAnotherUser(t *testing.T) {
	t.Parallel()
	needLandlock(t)
	if os.Geteuid() != 0 {
		t.Skip("switching user needs root")
	}
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	prog, secret := filepath.Join(dir, "upstream"), filepath.Join(dir, "secret")
	if err := os.WriteFile(prog, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	const nobody = 65534
	uid, gid := int64(nobody), int64(nobody)
	up := Upstream{Name: "fake", Command: []string{prog, "-test.run=^$"}, RunAs: &RunAs{UID: &uid, GID: &gid},
		Env: map[string]string{envFake: "snoop", "SNOOP_FILES": secret}}
	lines := snoopLines(t, Options{Sandbox: SandboxOptions{Launcher: prog}}, up)
	if want := fmt.Sprintf("%d:%d", nobody, nobody); lines["ids"] != want {
		t.Errorf("upstream ids = %q, want %s", lines["ids"], want)
	}
	if !strings.Contains(lines[secret], "permission denied") {
		t.Errorf("upstream as nobody reading the gateway user's 0600 file: %q, want permission denied", lines[secret])
	}
}
