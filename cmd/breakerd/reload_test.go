package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/tests/daemontest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/breakerd/breakerd/internal/tests/testredis"
)

// until waits for cond (a port, a log line: another process's progress,
// not a cooldown) until the test's deadline, and shows out if it never
// holds.
func until(t *testing.T, what string, out *daemontest.Buffer, cond func() bool) {
	t.Helper()
	held := false
	defer func() {
		if !held {
			t.Logf("output:\n%s", out)
		}
	}()
	daemontest.Eventually(t, what, cond)
	held = true
}

func TestSIGHUPReloadsThePolicyAndRejectsABadOne(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	write := func(s string) {
		if err := os.WriteFile(policyFile, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const shadowed = "breakers:\n  - match: \"overlap:*\"\n  - match: \"overlap:a*\"\n"
	write("defaults:\n  threshold: 5\n" + shadowed)
	addr, metricsAddr := testredis.FreeAddr(t), testredis.FreeAddr(t)
	p := startDaemon(t, "--listen", addr, "--config", policyFile, "--config-poll", "0", "--metrics-listen", metricsAddr)
	out := p.out

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	serving := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && res.Status == healthpb.HealthCheckResponse_SERVING
	}
	until(t, "SERVING", out, serving)
	warned := func() int { return strings.Count(out.String(), `policy rule shadowed`) }
	if warned() != 1 || !strings.Contains(out.String(), `breakers[1] (match \"overlap:a*\") is shadowed by breakers[0]`) {
		t.Errorf("start logged %d shadowed-rule warnings, want 1 naming breakers[1]:\n%s", warned(), out)
	}
	metric := func(series string) string {
		res, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return ""
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, series+" "); ok {
				return v
			}
		}
		return ""
	}

	write("defaults:\n  min_workers: 0\n")
	p.signal(t, syscall.SIGHUP)
	until(t, "a rejected reload", out, func() bool { return metric(`breakerd_config_reloads_total{result="error"}`) == "1" })
	if !strings.Contains(out.String(), "policy reload rejected") || !strings.Contains(out.String(), "defaults.min_workers: must be at least 1") {
		t.Errorf("no log of the rejected file naming its field:\n%s", out)
	}
	if !serving() || metric(`breakerd_config_last_reload_successful`) != "0" {
		t.Errorf("after a bad file: serving %v, last reload successful %q; want serving and 0", serving(), metric(`breakerd_config_last_reload_successful`))
	}

	write("defaults:\n  min_workers: 1\n" + shadowed)
	p.signal(t, syscall.SIGHUP)
	until(t, "a reload", out, func() bool { return metric(`breakerd_config_reloads_total{result="ok"}`) == "1" })
	until(t, "the reload's warning", out, func() bool { return warned() == 2 })
	if !strings.Contains(out.String(), "policy reloaded") {
		t.Errorf("no log of the reload:\n%s", out)
	}

	p.stop(t)
}

func TestSIGHUPWithoutAPolicyFileIsLoggedNotFatal(t *testing.T) {
	t.Parallel()
	addr := testredis.FreeAddr(t)
	p := startDaemon(t, "--listen", addr)
	out := p.out
	until(t, "serving", out, func() bool { return strings.Contains(out.String(), "breakerd serving") })
	p.signal(t, syscall.SIGHUP)
	until(t, "the SIGHUP log", out, func() bool { return strings.Contains(out.String(), "nothing to reload") })
	p.stop(t)
}
