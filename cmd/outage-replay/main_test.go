package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/cmd/outage-replay/replay"
	"github.com/breakerd/breakerd/internal/cli"
	"github.com/breakerd/breakerd/internal/daemon"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/tests/testredis"
)

func noEnv(string) string { return "" }

func TestParseFlags(t *testing.T) {
	cfg, printPolicy, _, err := parseFlags(nil, noEnv, io.Discard)
	if err != nil || printPolicy {
		t.Fatalf("parseFlags(nil) = %v, %v", printPolicy, err)
	}
	want := replay.Default()
	if cfg != want {
		t.Errorf("defaults = %+v, want the incident's %+v", cfg, want)
	}
	cfg, _, _, err = parseFlags([]string{"--runs", "12", "--outage", "5m", "--scale", "120", "--step-price", "0.1"}, noEnv, io.Discard)
	if err != nil || cfg.Runs != 12 || cfg.Outage != 5*time.Minute || cfg.Scale != 120 || cfg.StepPrice != 0.1 {
		t.Errorf("parseFlags = %+v, %v", cfg, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--runs", "0"}, "--runs:"},
		{[]string{"--scale", "100000", "--cooldown", "30s"}, "--cooldown:"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--sweep-outage", "18m,soon"}, `--sweep-outage: "soon" is not a positive duration`},
		{[]string{"--recovery-check", "30s", "--addr", "127.0.0.1:1"}, "--recovery-check: needs the in-process daemon"},
		{[]string{"--recovery-check", "1s"}, "--recovery-check: 1s divided by --scale 60 is under"},
	} {
		if _, _, _, err := parseFlags(tc.args, noEnv, io.Discard); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v, want an error starting %q", tc.args, err, tc.want)
		}
	}
}

func TestHelpNamesThePolicy(t *testing.T) {
	var usage bytes.Buffer
	err := run(context.Background(), []string{"--help"}, noEnv, &usage)
	if !errors.Is(err, cli.ErrHelp) {
		t.Fatalf("run(--help) = %v", err)
	}
	for _, want := range []string{"--print-policy", "--addr", "--scale", "(env BREAKERD_REDIS_URL)"} {
		if !strings.Contains(usage.String(), want) {
			t.Errorf("--help does not mention %s:\n%s", want, usage.String())
		}
	}
}

func TestPrintPolicy(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--print-policy", "--scale", "30"}, noEnv, &out); err != nil {
		t.Fatal(err)
	}
	set, err := policy.Parse(out.Bytes())
	if err != nil {
		t.Fatalf("the printed policy does not parse: %v\n%s", err, out.String())
	}
	p := set.For(replay.NamePrefix + "x:arm4:web_search")
	if p.CooldownBase != time.Second || p.CooldownCap != 30*time.Second || p.ProbeTimeout != 2*time.Second || p.MinWorkers != 2 {
		t.Errorf("policy at scale 30 = %+v, want cooldowns 1s..30s, probe lease 2s, quorum 2", p)
	}
}

// fast is a small replay for an external daemon: 16 runs, 600 times
// faster than the incident (later flags may slow it), with a 2m cooldown
// cap so that the fleet breakers close well within the 10m tail.
var fast = []string{"--runs", "16", "--scale", "600", "--cooldown-cap", "2m", "--tail", "10m"}

// startBreakerd runs the daemon as cmd/breakerd does, on an embedded
// Redis, with the policy file when one is given.
func startBreakerd(t *testing.T, policyFile string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := daemon.Config{Listen: "127.0.0.1:0", PolicyFile: policyFile, EventsMaxLen: 1000, EventRetention: time.Hour,
		ShutdownTimeout: time.Second, HealthInterval: time.Second, LogFormat: "text"}
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(a net.Addr) { ready <- a })
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case a := <-ready:
		return a.String()
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	}
	return ""
}

// TestExternalDaemonWithThePrintedPolicy: a daemon of the user's own,
// given --print-policy's file, is the replay's breaker: the fleet breakers
// trip by the replay's policy and close after the outage, and no warning
// says otherwise. An external daemon decides on its Redis's real clock, so
// the replay runs on the wall clock; a machine that falls behind the
// schedule, or whose clients' RPCs outlast their real-time budget (both
// the replay's own warnings), distorts the fleet rows. Such a run is not
// judged: the replay runs again, slower, until the last scale, which is.
func TestExternalDaemonWithThePrintedPolicy(t *testing.T) {
	testredis.Tier(t, "replay")
	scales := []string{"600", "200", "60", "20"}
	for i, scale := range scales {
		args := append(append([]string(nil), fast...), "--scale", scale)
		var pol bytes.Buffer
		if err := run(context.Background(), append([]string{"--print-policy"}, args...), noEnv, &pol); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "replay.yaml")
		if err := os.WriteFile(file, pol.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		addr := startBreakerd(t, file)
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"--addr", addr}, args...), noEnv, &out)
		t.Logf("--scale %s:\n%s", scale, out.String())
		var problems []string
		for _, want := range []string{"breakerd at " + addr, "breakerd fleet-wide, tool removed + notice", "first successful probe"} {
			if !strings.Contains(out.String(), want) {
				problems = append(problems, fmt.Sprintf("output lacks %q", want))
			}
		}
		behind := false
		for _, line := range strings.Split(out.String(), "\n") {
			switch {
			case strings.HasPrefix(line, "WARNING") && (strings.Contains(line, "behind the replay's schedule") ||
				strings.Contains(line, "breakerd RPCs failed")):
				behind = true
			case strings.HasPrefix(line, "WARNING"):
				problems = append(problems, "with the printed policy: "+line)
			}
		}
		if errors.Is(err, replay.ErrSavings) {
			problems = append(problems, err.Error())
		}
		if err != nil && !errors.Is(err, replay.ErrPolicy) && !errors.Is(err, replay.ErrSavings) {
			t.Fatalf("run at --scale %s: %v", scale, err)
		}
		if len(problems) > 0 && behind && i < len(scales)-1 {
			t.Logf("the machine fell behind the replay at --scale %s (see its warnings); again, slower", scale)
			continue
		}
		for _, p := range problems {
			t.Errorf("--scale %s: %s", scale, p)
		}
		return
	}
}

func TestExternalDaemonWithItsOwnPolicy(t *testing.T) {
	testredis.Tier(t, "replay")
	addr := startBreakerd(t, "") // breakerd's defaults: a 30s cooldown, not 50ms
	var out bytes.Buffer
	err := run(context.Background(), append(append([]string(nil), fast...), "--addr", addr, "--tail", "2m"), noEnv, &out)
	if !errors.Is(err, replay.ErrPolicy) {
		t.Errorf("run = %v, want ErrPolicy", err)
	}
	if !strings.Contains(out.String(), "WARNING") || !strings.Contains(out.String(), "--print-policy") {
		t.Errorf("output does not warn about the policy:\n%s", out.String())
	}
}

func TestNoDaemonAtAddr(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	err = run(context.Background(), []string{"--addr", addr}, noEnv, io.Discard)
	if err == nil || !strings.HasPrefix(err.Error(), "--addr: no breakerd answers at "+addr) {
		t.Errorf("run(--addr %s) = %v, want an error naming --addr", addr, err)
	}
}

// The new arms' policies show in every answer, tripped or not: against a
// daemon without --print-policy's file, arms 7 and 8 are reported and the
// run fails, even where nothing trips (a slow vendor fails nothing).
func TestExternalDaemonWithoutTheNewArmsPolicies(t *testing.T) {
	testredis.Tier(t, "replay")
	addr := startBreakerd(t, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--window", "60m"}, "arm 7: " + replay.ErrPolicy.Error() + ": its breaker is not in window mode"},
		{[]string{"--slow-outage", "25s"}, "arm 8: " + replay.ErrPolicy.Error() + ": its breaker's slow_call is 0ms, the replay's is 3ms"},
	} {
		var out bytes.Buffer
		err := run(context.Background(), append(append(append([]string(nil), fast...), "--addr", addr, "--tail", "2m"), tc.args...), noEnv, &out)
		if !errors.Is(err, replay.ErrPolicy) {
			t.Errorf("run %v = %v, want ErrPolicy", tc.args, err)
		}
		if !strings.Contains(out.String(), "WARNING: "+tc.want) {
			t.Errorf("run %v: the output lacks %q:\n%s", tc.args, tc.want, out.String())
		}
	}
}
