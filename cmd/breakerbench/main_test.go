package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/breakerd/breakerd/internal/cli"
	"github.com/breakerd/breakerd/internal/tests/testredis"
)

// TestMain lets this test binary stand in for breakerbench when the bench
// re-runs itself with --serve for its server processes.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "--serve" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestRunTiny runs the command end to end, servers in child processes,
// and checks that the report ends with the ratios and reads each server's
// CPU. Nothing is timed.
func TestRunTiny(t *testing.T) {
	args := []string{"--quick", "--rounds", "1", "--duration", "20ms", "--callers", "4", "--breakers", "10",
		"--peer-breakers", "2", "--wire-pass", "3", "--trips", "1", "--pollers", "2", "--only", "noop,ceiling,pair-1k-raw,trip"}
	if _, err := exec.LookPath("redis-server"); err != nil {
		addr := os.Getenv("BREAKERD_TEST_REDIS_ADDR")
		if addr == "" {
			t.Skip("neither redis-server in PATH nor BREAKERD_TEST_REDIS_ADDR: the bench needs a real Redis")
		}
		args = append(args, "--redis-addr", addr)
	}
	var out bytes.Buffer
	if err := run(testredis.UntilDeadline(t), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "ratio pair-1k-raw / ceiling:") || !strings.Contains(last, "median") {
		t.Errorf("last line = %q, want the median of pair-1k-raw / ceiling", last)
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "pair-1k-raw" && f[len(f)-1] == "-" {
			t.Errorf("pair-1k-raw row has no daemon CPU: %q", l)
		}
	}
}

func TestRunBadFlags(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--rounds", "0"}, &out); err == nil || !strings.Contains(err.Error(), "--rounds") {
		t.Errorf("run(--rounds 0) = %v, want an error naming --rounds", err)
	}
	if err := run(context.Background(), []string{"--fleet", "--quick", "--fleet-zipf", "1"}, &out); err == nil || !strings.Contains(err.Error(), "--fleet-zipf") {
		t.Errorf("run(--fleet --fleet-zipf 1) = %v, want an error naming --fleet-zipf", err)
	}
	// --quick keeps a failure window given explicitly: one past the quick
	// run's 30s is refused, not replaced.
	if err := run(context.Background(), []string{"--fleet", "--quick", "--fleet-fail-until", "40s"}, &out); err == nil || !strings.Contains(err.Error(), "--fleet-fail-until") {
		t.Errorf("run(--fleet --quick --fleet-fail-until 40s) = %v, want an error naming --fleet-fail-until", err)
	}
	if err := run(context.Background(), []string{"--nope"}, &out); err == nil {
		t.Error("run(--nope) = nil, want an error")
	}
	if err := run(context.Background(), []string{"--help"}, &out); !errors.Is(err, cli.ErrHelp) {
		t.Errorf("run(--help) = %v, want cli.ErrHelp", err)
	}
	if err := run(context.Background(), []string{"--serve", "bogus"}, &out); err == nil || !strings.Contains(err.Error(), "--serve") {
		t.Errorf("run(--serve bogus) = %v, want an error naming --serve", err)
	}
}

// TestExitStatus: usage errors exit 2 with the flag named, --help and
// --version exit 0 and print to stdout, as every binary of the project does.
func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		status int
		stdout string // a prefix; "" for none
		stderr string // a substring; "" for none
	}{
		{[]string{"--rounds", "0"}, 2, "", "--rounds"},
		{[]string{"--nope"}, 2, "", "unknown flag: --nope"},
		{[]string{"extra"}, 2, "", `unexpected argument "extra"`},
		{[]string{"--fleet", "--fleet-zipf", "1"}, 2, "", "--fleet-zipf"},
		{[]string{"--help"}, 0, "Usage: breakerbench [flags]", ""},
		{[]string{"--version"}, 0, "breakerbench ", ""},
	} {
		var out, errs bytes.Buffer
		status := cli.Exit("breakerbench", run(context.Background(), tc.args, &out), &errs)
		if status != tc.status || !strings.HasPrefix(out.String(), tc.stdout) || !strings.Contains(errs.String(), tc.stderr) {
			t.Errorf("breakerbench %v: status %d, stdout %q, stderr %q; want %d, stdout starting %q, stderr containing %q",
				tc.args, status, out.String(), errs.String(), tc.status, tc.stdout, tc.stderr)
		}
	}
}
