package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/spf13/pflag"
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
	var out, errs bytes.Buffer
	if err := run(context.Background(), args, &out, &errs); err != nil {
		t.Fatalf("run: %v\n%s%s", err, out.String(), errs.String())
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
	var out, errs bytes.Buffer
	if err := run(context.Background(), []string{"--rounds", "0"}, &out, &errs); err == nil || !strings.Contains(err.Error(), "--rounds") {
		t.Errorf("run(--rounds 0) = %v, want an error naming --rounds", err)
	}
	if err := run(context.Background(), []string{"--fleet", "--quick", "--fleet-zipf", "1"}, &out, &errs); err == nil || !strings.Contains(err.Error(), "--fleet-zipf") {
		t.Errorf("run(--fleet --fleet-zipf 1) = %v, want an error naming --fleet-zipf", err)
	}
	// --quick keeps a failure window given explicitly: one past the quick
	// run's 30s is refused, not replaced.
	if err := run(context.Background(), []string{"--fleet", "--quick", "--fleet-fail-until", "40s"}, &out, &errs); err == nil || !strings.Contains(err.Error(), "--fleet-fail-until") {
		t.Errorf("run(--fleet --quick --fleet-fail-until 40s) = %v, want an error naming --fleet-fail-until", err)
	}
	if err := run(context.Background(), []string{"--nope"}, &out, &errs); err == nil {
		t.Error("run(--nope) = nil, want an error")
	}
	if err := run(context.Background(), []string{"--help"}, &out, &errs); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("run(--help) = %v, want pflag.ErrHelp", err)
	}
	if err := run(context.Background(), []string{"--serve", "bogus"}, &out, &errs); err == nil || !strings.Contains(err.Error(), "--serve") {
		t.Errorf("run(--serve bogus) = %v, want an error naming --serve", err)
	}
}
