package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/tests/testredis"
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
	testredis.Tier(t, "bench")
	o := tiny(t)
	var out bytes.Buffer
	rows, err := run(testredis.UntilDeadline(t), o, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	// Fast mode: no RPC and no Redis script for a healthy call the
	// views know (the warm-up taught them).
	wantRPCs := map[string]float64{"noop": 1, "ceiling": 1, "peer-64": 0, "peer-1": 0,
		"allow-1k-fast": 0, "pair-1k-fast": 0, "pair-hot-fast": 0,
		"pair-1k-py-fast": 0, "pair-1k-py-async-fast": 0, "pair-1k-ts-fast": 0,
		"pair-1k-py-fast@1": 0, "pair-1k-py-async-fast@1": 0, "pair-1k-ts-fast@1": 0}
	for _, s := range scenarios() {
		r, ok := rows[s.name]
		if !ok && s.proc != nil && regexp.MustCompile(`(?m)^  `+regexp.QuoteMeta(s.name)+`: skipped: \S+ is not in PATH$`).MatchString(out.String()) {
			continue // a client's row whose interpreter is missing here says so
		}
		if !ok {
			t.Errorf("no row for %s", s.name)
			continue
		}
		if r.errs != 0 || r.ops == 0 {
			t.Errorf("%s: %d ops, %d errors (the first: %v); want some ops and no errors", s.name, r.ops, r.errs, r.err)
		}
		want, ok := wantRPCs[s.name]
		if !ok {
			want = 1
			if strings.HasPrefix(s.name, "pair-") {
				want = 2
			}
			// breakerd's target: one Redis round trip per RPC (a
			// client's driver has no wire pass).
			if r.rtPerOp != want && (s.proc == nil || r.rtPerOp != noWirePass) {
				t.Errorf("%s: %.2f Redis round trips per op, want %.0f (one per RPC)", s.name, r.rtPerOp, want)
			}
		}
		if r.rpcsPerOp != want {
			t.Errorf("%s: %.2f RPCs per op, want %.0f", s.name, r.rpcsPerOp, want)
		}
		if strings.HasSuffix(strings.Split(s.name, "@")[0], "-fast") { // a fast row, at any callers
			// A Redis of its own: nobody else's scripts. A daemon's
			// background writes (its savings tally, flushed each second)
			// are commands too, but never a script.
			// A client's driver counts the calls its timed pairs sent
			// (its RPCs, checked above); Redis's count of its row holds
			// the warm-up that taught its views every breaker. A view
			// that resynced meanwhile (its Watch stream taken as silent
			// on a busy host, and dialled again) listed the breakers
			// that hold state, a script each: not judged.
			switch {
			case o.RedisAddr != "" || r.scriptsPerOp == 0 || s.proc != nil:
			case r.resyncs > 0:
				t.Logf("%s: %.4f Redis script runs per healthy call, with %d resyncs of the views meanwhile: not judged (the commands Redis ran most: %s)", s.name, r.scriptsPerOp, r.resyncs, r.scriptsTop)
			default:
				t.Errorf("%s: %.4f Redis script runs per healthy call, want 0 (the commands Redis ran most: %s)", s.name, r.scriptsPerOp, r.scriptsTop)
			}
			continue
		}
		if s.name != "noop" && r.cmdsPerOp <= 0 {
			t.Errorf("%s: %.2f Redis commands per op, want some", s.name, r.cmdsPerOp)
		}
	}
	// The counting policies applied: they write where a healthy
	// consecutive-mode pair does not (a Redis of its own, or others'
	// commands would blur the counts).
	if o.RedisAddr == "" {
		base := rows["pair-1k-raw"].cmdsPerOp
		for _, name := range []string{"pair-1k-window-raw", "pair-1k-slow-raw"} {
			if got := rows[name].cmdsPerOp; got <= base {
				t.Errorf("%s: %.2f Redis commands per pair, pair-1k-raw %.2f: want more (its policy writes)", name, got, base)
			}
		}
	}
	// Tracing adds no Redis work: a traced daemon's pair runs the default
	// daemon's two scripts. (Commands per pair also hold the daemons'
	// background writes, a savings flush a second, which a loaded run
	// spreads over fewer pairs: they are reported, not compared.)
	if o.RedisAddr == "" {
		for _, name := range []string{"pair-1k-trace-0.01", "pair-1k-trace-1"} {
			r, base := rows[name], rows["pair-1k-raw"]
			if r.scriptsPerOp != 2 || r.scriptsPerOp != base.scriptsPerOp {
				t.Errorf("%s: %.2f scripts per pair, pair-1k-raw %.2f: want 2 each", name, r.scriptsPerOp, base.scriptsPerOp)
			}
		}
	}
	for _, name := range []string{"pair-1k-trace-0.01", "pair-1k-trace-1"} {
		if !strings.Contains(out.String(), "ratio "+name+" / pair-1k-raw: ") {
			t.Errorf("the output has no ratio of %s to tracing off", name)
		}
	}
	for _, f := range fastPairTargets {
		if _, ran := rows[f.name]; ran && !strings.Contains(out.String(), "  "+f.name+": pair p50 ") {
			t.Errorf("the output has no in-process p50 of %s", f.name)
		}
	}
	for _, s := range scenarios() { // a client's strict pair: its CPU, by process
		r, ran := rows[s.name]
		if !ran || s.proc == nil || s.proc.mode != "strict" {
			continue
		}
		if r.clientCPU <= 0 || r.redisCPU <= 0 {
			t.Errorf("%s: driver %v, Redis %v of CPU per pair; want both measured", s.name, r.clientCPU, r.redisCPU)
		}
		if !strings.Contains(out.String(), "  "+s.name+": driver ") {
			t.Errorf("the output has no CPU per pair of %s", s.name)
		}
	}
	if _, err := os.Stat("/proc/self/stat"); err == nil { // the bench's own CPU and Redis's, per op
		for _, name := range []string{"ceiling", "pair-1k-raw", "pair-hot-raw"} {
			if r := rows[name]; r.clientCPU <= 0 || r.redisCPU <= 0 {
				t.Errorf("%s: the bench %v, Redis %v of CPU per op; want both measured", name, r.clientCPU, r.redisCPU)
			}
		}
	}
	if !strings.Contains(out.String(), "pair-1k-window-raw (mode: window") {
		t.Error("the output does not report the counting policies' cost")
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
	for _, wt := range watchTrips { // the other clients' views: timed, or missing their interpreter
		timed := fmt.Sprintf("  %s: %d trips on daemon A", wt.name, o.Trips*o.Rounds)
		if !strings.Contains(out.String(), timed) && !strings.Contains(out.String(), "  "+wt.name+": skipped: "+wt.command+" is not in PATH") {
			t.Errorf("the output lacks %q", timed)
		}
	}
	// Headings say what they measure, not how the bench came to be.
	if m := regexp.MustCompile(`(?i)issue \d+|§\d`).FindString(out.String()); m != "" {
		t.Errorf("the output tells development history (%q)", m)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "ratio ") || !strings.Contains(last, "median") {
		t.Errorf("last line = %q, want the median of a ratio", last)
	}
	for _, want := range []string{"ratio pair-hot-fast / peer-1:", "ratio pair-1k-go-http / ceiling:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	for _, want := range []string{"ratio pair-1k-http / pair-1k-raw:", "ratio pair-hot-http / pair-hot-raw:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q", want)
		}
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

// TestProcCPU spends CPU until getrusage counts 50 ms of it (five of the
// 10 ms ticks /proc counts in), whatever ran before: procCPU must see it.
func TestProcCPU(t *testing.T) {
	var spent time.Duration
	for spent < 50*time.Millisecond {
		var err error
		if spent, err = selfCPU(); err != nil {
			t.Fatal(err)
		}
	}
	d, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 {
		t.Errorf("procCPU(self) = %s after %s of CPU by getrusage, want the CPU this test has spent", d, spent)
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

// TestFleetTiny runs the fleet simulation small and checks the wire: no
// RPC and no script for healthy calls, one Watch stream per connection
// (one resync each), a trip that reached every view, and every call
// answered (allowed or denied). Nothing here is timed.
func TestFleetTiny(t *testing.T) {
	testredis.Tier(t, "bench")
	o := DefaultFleet()
	o.Clients, o.Conns, o.Breakers, o.Rate = 200, 2, 20, 5
	o.Warmup, o.Duration, o.FailFrom, o.FailUntil, o.Cooldown = 200*time.Millisecond, 4*time.Second, time.Second, 3*time.Second, 500*time.Millisecond
	if _, err := exec.LookPath(o.RedisServer); err != nil {
		o.RedisAddr = os.Getenv("BREAKERD_TEST_REDIS_ADDR")
		if o.RedisAddr == "" {
			t.Skip("neither redis-server in PATH nor BREAKERD_TEST_REDIS_ADDR: the fleet needs a real Redis")
		}
	}
	f := &fleet{o: o}
	defer f.close()
	var out bytes.Buffer
	r, err := f.run(context.Background(), &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if n := f.errs.Load(); n != 0 {
		t.Errorf("%d calls ended in an error (the last: %v), want none", n, f.lastErr.Load())
	}
	h := r.healthy
	if got := h[1].rpcs - h[0].rpcs; got != 0 {
		t.Errorf("healthy phase: %d RPCs, want 0 (fast mode: Allow in-process, healthy successes not sent)", got)
	}
	if h[1].calls-h[0].calls == 0 {
		t.Error("healthy phase: no calls made")
	}
	if o.RedisAddr == "" { // a Redis of its own: nobody else's scripts
		if got := h[1].by["evalsha"] - h[0].by["evalsha"]; got != 0 {
			t.Errorf("healthy phase: %d scripts on Redis, want 0", got)
		}
	}
	if len(r.trips) == 0 {
		t.Fatal("the failing breaker never tripped")
	}
	for i, d := range r.denyAt {
		if d.IsZero() {
			t.Errorf("connection %d's view never denied the failing breaker", i)
		}
	}
	if got := r.failing[1].failed - r.failing[0].failed; got == 0 {
		t.Error("no call failed while the vendor was down")
	}
	if got := r.failing[1].denied - r.failing[0].denied; got == 0 {
		t.Error("no call was denied while the vendor was down")
	}
	var resyncs int64
	for _, s := range r.stats {
		resyncs += s.Resyncs
	}
	if resyncs != int64(o.Conns) {
		t.Errorf("%d resyncs over %d connections, want one each (one Watch stream per connection, for all its workers)", resyncs, o.Conns)
	}
	f.report(&out, r)
	for _, want := range []string{"propagation, from the trip in Redis", "healthy ", "storm:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestFleetValidate(t *testing.T) {
	for _, tc := range []struct {
		edit func(*FleetOptions)
		want string
	}{
		{func(o *FleetOptions) { o.Clients = 0 }, "--fleet-clients"},
		{func(o *FleetOptions) { o.Zipf = 1 }, "--fleet-zipf"},
		{func(o *FleetOptions) { o.FailRank = o.Breakers }, "--fleet-fail-rank"},
		{func(o *FleetOptions) { o.FailUntil = o.FailFrom }, "--fleet-fail-until"},
		{func(o *FleetOptions) { o.RedisAddr = "10.0.0.1:6379" }, "--redis-addr"},
	} {
		o := DefaultFleet()
		tc.edit(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want an error naming %s", err, tc.want)
		}
	}
	if err := QuickFleet().Validate(); err != nil {
		t.Errorf("QuickFleet().Validate() = %v", err)
	}
}

// TestDriverWithoutItsInterpreterIsSkipped: a client's row whose
// interpreter is not in PATH is skipped with that reason, before any
// daemon is asked; a driver's skip is read from its JSON line.
func TestDriverWithoutItsInterpreterIsSkipped(t *testing.T) {
	d := driver{command: "no-such-interpreter-breakerbench", script: pyDriver, mode: "strict", callers: 1}
	_, err := d.run(context.Background(), &target{}, Defaults(), time.Millisecond, 0, nil)
	var skip skipped
	if !errors.As(err, &skip) || !strings.Contains(skip.reason, "no-such-interpreter-breakerbench is not in PATH") {
		t.Errorf("run = %v, want skipped: the interpreter is not in PATH", err)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not in PATH: the driver's own skip is not checked")
	}
	// The driver checks the daemon before it reports a mode it lacks, so
	// a fast-mode skip needs a daemon: a port nothing listens on is a
	// failure, named, not a skip.
	d = driver{command: "python3", script: pyDriver, mode: "strict", callers: 1}
	_, err = d.run(context.Background(), &target{httpURL: "http://127.0.0.1:1"}, Defaults(), time.Millisecond, 0, nil)
	if err == nil || errors.As(err, &skip) || !strings.Contains(err.Error(), "no breakerd answers") {
		t.Errorf("run against no daemon = %v, want a failure saying no breakerd answers", err)
	}
}

func TestCommandsPerOpAreTheMedianRounds(t *testing.T) {
	// Five rounds of a healthy pair's 4 commands, one of them sharing its
	// run with a daemon's background listing (3,000 reads more), and one
	// round with no ops at all.
	ss := []sample{{ops: 1000, cmds: 4000}, {ops: 900, cmds: 3600}, {ops: 1000, cmds: 7000}, {ops: 1100, cmds: 4400}, {}}
	r := summarize(scenario{name: "pair-1k-raw"}, ss, 2)
	if r.cmdsPerOp != 4 {
		t.Errorf("cmds/op = %.2f, want 4: the median round's, not the listing's round weighed in", r.cmdsPerOp)
	}
	// A cost every round pays shows.
	ss = []sample{{ops: 1000, cmds: 5000}, {ops: 1000, cmds: 5000}, {ops: 1000, cmds: 9000}}
	if r := summarize(scenario{name: "pair-1k-raw"}, ss, 2); r.cmdsPerOp != 5 {
		t.Errorf("cmds/op = %.2f, want 5", r.cmdsPerOp)
	}
	if r := summarize(scenario{name: "pair-1k-raw"}, []sample{{}}, 2); r.cmdsPerOp != 0 {
		t.Errorf("cmds/op with no ops = %.2f, want 0", r.cmdsPerOp)
	}
}

func TestClientCPUReport(t *testing.T) {
	strict, fast := &driver{mode: "strict"}, &driver{mode: "fast"}
	run := []scenario{{name: asyncScaling.num, proc: strict}, {name: asyncScaling.den, proc: strict},
		{name: "pair-1k-py-fast", proc: fast}, {name: "pair-1k-raw"}}
	rows := map[string]row{
		asyncScaling.num: {rate: 2000, clientCPU: 200 * time.Microsecond, serverCPU: 300 * time.Microsecond,
			redisCPU: 100 * time.Microsecond, cpuMeasured: true, cores: 1.2},
		asyncScaling.den:  {rate: 1000, clientCPU: 400 * time.Microsecond, redisCPU: 150 * time.Microsecond, cores: 1.1},
		"pair-1k-py-fast": {rate: 90000, clientCPU: 10 * time.Microsecond},
		"pair-1k-raw":     {rate: 5000, cpuMeasured: true, serverCPU: 60 * time.Microsecond},
	}
	var out bytes.Buffer
	clientCPUReport(&out, run, rows)
	n := runtime.NumCPU()
	for _, want := range []string{
		"  " + asyncScaling.num + ": driver 200.0 µs, daemon 300.0 µs, Redis 100.0 µs; 1.20 cores\n",
		"  " + asyncScaling.den + ": driver 400.0 µs, daemon - µs, Redis 150.0 µs; 1.10 cores\n",
		// 600 µs of CPU per pair: n cores fill at n / 600 µs pairs/s, over the den's 1,000.
		fmt.Sprintf("at most %.2fx on %d cores (%s's 600.0 µs of CPU per pair fill them at %.0f pairs/s; %s ran 1000)",
			float64(n)/600e-6/1000, n, asyncScaling.num, float64(n)/600e-6, asyncScaling.den),
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
	for _, not := range []string{"pair-1k-py-fast", "pair-1k-raw"} {
		if strings.Contains(out.String(), not) {
			t.Errorf("the report names %s, which is no client's strict pair:\n%s", not, out.String())
		}
	}
	// The bound needs the daemon's CPU at the num's callers.
	num := rows[asyncScaling.num]
	num.cpuMeasured, num.serverCPU = false, 0
	rows[asyncScaling.num] = num
	out.Reset()
	clientCPUReport(&out, run, rows)
	if strings.Contains(out.String(), "at most") {
		t.Errorf("a bound without the daemon's CPU:\n%s", out.String())
	}
}

// TestPairCPUReport: a strict pair's CPU is set beside a ceiling RPC's,
// process by process, and needs the ceiling's figures.
func TestPairCPUReport(t *testing.T) {
	rows := map[string]row{
		"ceiling": {clientCPU: 20 * time.Microsecond, serverCPU: 30 * time.Microsecond, redisCPU: 10 * time.Microsecond,
			cpuMeasured: true, cores: 1.8},
		"pair-1k-raw": {clientCPU: 50 * time.Microsecond, serverCPU: 70 * time.Microsecond, redisCPU: 30 * time.Microsecond,
			cpuMeasured: true, cores: 1.6},
		"pair-hot-raw": {clientCPU: 50 * time.Microsecond, redisCPU: 30 * time.Microsecond}, // no daemon CPU: no line
	}
	var out bytes.Buffer
	pairCPUReport(&out, rows)
	want := "  pair-1k-raw: 150.0 µs of CPU per pair (the bench 50.0, the daemon 70.0, Redis 30.0), " +
		"2.50x a ceiling RPC's 60.0 (20.0, 30.0, 10.0); 1.60 and 1.80 cores busy\n"
	if out.String() != want {
		t.Errorf("the report:\n%q\nwant:\n%q", out.String(), want)
	}
	delete(rows, "ceiling")
	out.Reset()
	pairCPUReport(&out, rows)
	if out.Len() != 0 {
		t.Errorf("a report without the ceiling:\n%s", out.String())
	}
}
