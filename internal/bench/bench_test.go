package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// tiny is a run small enough for a test: one round, a few callers.
func tiny(t *testing.T) Options {
	t.Helper()
	o := Defaults()
	o.Rounds, o.Duration, o.Callers, o.Breakers, o.PeerBreakers = 1, 30*time.Millisecond, 4, 10, 2
	o.WirePass, o.Trips, o.Pollers = 5, 1, 2
	if _, err := exec.LookPath(o.RedisServer); err != nil {
		o.RedisAddr = os.Getenv("BREAKERD_TEST_REDIS_ADDR")
		if o.RedisAddr == "" {
			t.Skip("neither redis-server in PATH nor BREAKERD_TEST_REDIS_ADDR: the bench needs a real Redis")
		}
	}
	return o
}

// TestRunTiny runs every scenario once, in-process, and checks what the
// wire says about each: no errors, the RPCs the bench sent per op, and
// one Redis round trip per breakerd RPC. Nothing here is timed.
func TestRunTiny(t *testing.T) {
	o := tiny(t)
	var out bytes.Buffer
	rows, err := run(context.Background(), o, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	// Fast mode: no RPC and no Redis command for a healthy call the
	// views know (the warm-up taught them).
	wantRPCs := map[string]float64{"noop": 1, "ceiling": 1, "peer-64": 0, "peer-1": 0,
		"allow-1k-fast": 0, "pair-1k-fast": 0, "pair-hot-fast": 0}
	for _, s := range scenarios() {
		r, ok := rows[s.name]
		if !ok {
			t.Errorf("no row for %s", s.name)
			continue
		}
		if r.errs != 0 || r.ops == 0 {
			t.Errorf("%s: %d ops, %d errors; want some ops and no errors", s.name, r.ops, r.errs)
		}
		want, ok := wantRPCs[s.name]
		if !ok {
			want = 1
			if strings.HasPrefix(s.name, "pair-") {
				want = 2
			}
			// breakerd's target: one Redis round trip per RPC.
			if r.rtPerOp != want {
				t.Errorf("%s: %.2f Redis round trips per op, want %.0f (one per RPC)", s.name, r.rtPerOp, want)
			}
		}
		if r.rpcsPerOp != want {
			t.Errorf("%s: %.2f RPCs per op, want %.0f", s.name, r.rpcsPerOp, want)
		}
		if strings.HasSuffix(s.name, "-fast") {
			if o.RedisAddr == "" && r.cmdsPerOp > 0 { // a Redis of its own: nobody else's commands
				t.Errorf("%s: %.4f Redis commands per healthy call, want 0", s.name, r.cmdsPerOp)
			}
			continue
		}
		if s.name != "noop" && r.cmdsPerOp <= 0 {
			t.Errorf("%s: %.2f Redis commands per op, want some", s.name, r.cmdsPerOp)
		}
	}
	if r := rows["ceiling"]; r.rtPerOp != 1 {
		t.Errorf("ceiling: %.2f Redis round trips per op, want 1 (one EVALSHA)", r.rtPerOp)
	}
	if r := rows["trip-to-deny"]; r.ops != int64(o.Trips*o.Rounds) {
		t.Errorf("trip-to-deny: %d trips timed, want %d", r.ops, o.Trips*o.Rounds)
	}
	for _, want := range []string{"trip-to-fast-view: 1 trips", "failure storm: 10 breakers", "staleness:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "ratio pair-hot-fast / peer-1:") || !strings.Contains(last, "median") {
		t.Errorf("last line = %q, want the median of a ratio", last)
	}
	if !strings.Contains(out.String(), "SET NX PX") {
		t.Error("the output does not say how the peer's store is built")
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Options)
		want string
	}{
		{func(o *Options) { o.Rounds = 0 }, "--rounds"},
		{func(o *Options) { o.Duration = 0 }, "--duration"},
		{func(o *Options) { o.Callers = 0 }, "--callers"},
		{func(o *Options) { o.RedisAddr = "10.0.0.1:6379" }, "--redis-addr"},
	} {
		o := Defaults()
		tc.edit(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want an error naming %s", err, tc.want)
		}
	}
	if err := Quick().Validate(); err != nil {
		t.Errorf("Quick().Validate() = %v", err)
	}
}

func TestProcCPU(t *testing.T) {
	d, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 {
		t.Errorf("procCPU(self) = %s, want the CPU this test has spent", d)
	}
}

// TestMemoryTiny fills a few breakers on the bench's own redis-server with
// both stream node settings and checks that open breakers and failure runs
// hold keys (a healthy breaker holds none).
func TestMemoryTiny(t *testing.T) {
	o := DefaultMemoryOptions()
	if _, err := exec.LookPath(o.RedisServer); err != nil {
		t.Skip("no redis-server in PATH: --memory measures on a server of its own")
	}
	o.Breakers, o.Callers = 20, 4
	open, failing, err := measureMemory(context.Background(), o, []string{"--stream-node-max-bytes", "512"})
	if err != nil {
		t.Fatal(err)
	}
	if open.keysPer < 1 || failing.keysPer < 1 {
		t.Errorf("keys per open breaker %.2f, per failure run %.2f; want at least one each", open.keysPer, failing.keysPer)
	}
	if open.bytesPer <= 0 {
		t.Errorf("bytes per open breaker %.0f, want more than 0", open.bytesPer)
	}
}
