package bench

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// ratio is one throughput ratio taken inside each round.
type ratio struct {
	num, den string
	target   float64 // 0: reported, not targeted
}

// maxDaemonCPU is the target for breakerd's CPU per RPC (pair-1k-raw)
// over the ceiling server's.
const maxDaemonCPU = 1.1

var ratios = append([]ratio{
	{"ceiling", "noop", 0},
	{"pair-1k-raw", "ceiling", 0.45},
	{"pair-hot-raw", "ceiling", 0.45},
	{"pair-1k-client", "ceiling", 0},
	{"pair-hot-client", "ceiling", 0},
	{"allow-1k-raw", "ceiling", 0},
	{"deny-open-raw", "noop", 0},
	{"pair-1k-window-raw", "pair-1k-raw", 0},
	{"pair-1k-slow-raw", "pair-1k-raw", 0},
	{"pair-1k-http", "pair-1k-raw", 0.5},
	{"pair-hot-http", "pair-hot-raw", 0.5},
	{"pair-1k-raw", "peer-64", 0},
	{"pair-hot-raw", "peer-1", 0},
	{"pair-1k-fast", "ceiling", 3},
	{"pair-1k-fast", "peer-64", 2},
	{"pair-hot-fast", "peer-1", 15},
	// The clients' rows (drivers.go), at 16 callers unless @N says.
	{"pair-1k-go-http", "ceiling", 0},
	{"pair-1k-py", "pair-1k-go-http", 0},
	{"pair-1k-py-async", "pair-1k-go-http", 0},
	{"pair-1k-ts", "pair-1k-go-http", 0},
	{"pair-1k-py@1", "pair-1k-go-http@1", 0},
	{"pair-1k-ts@1", "pair-1k-go-http@1", 0},
	{"pair-1k-ts", "pair-1k-client@16", 0.5},
	{"pair-1k-py-async", "pair-1k-client@16", 0.4},
	{"pair-1k-py-async@8", "pair-1k-py-async@1", 4},
	{"pair-1k-go-http@8", "pair-1k-go-http@1", 0},
	{"pair-1k-py-fast", "pair-1k-py", 20},
	{"pair-1k-py-async-fast", "pair-1k-py-async", 20},
	{"pair-1k-ts-fast", "pair-1k-ts", 20},
}, traceRatios...)

// fastPairTargets bound the p50 of a healthy pair (Allow, then Record
// of a success) that a client's fast mode answers in-process, one caller
// timing its own pairs in the driver: the client's cost per call with
// no round trip and no other caller to wait behind.
var fastPairTargets = []struct {
	name string
	max  time.Duration
}{
	{"pair-1k-py-fast@1", 10 * time.Microsecond},
	{"pair-1k-py-async-fast@1", 10 * time.Microsecond},
	{"pair-1k-ts-fast@1", 5 * time.Microsecond},
}

// row is one scenario's figures over every round.
type row struct {
	name, unit     string
	rate           float64 // median ops/s over rounds
	p50, p99, p999 time.Duration
	errs, ops      int64
	err            error // the first error of the first round that had one
	// cmdsPerOp is the median over rounds of a timed run's Redis commands
	// per op: a daemon's background work (its listing of the fleet) falls
	// into a round or two, where a cost of the op shows in every round.
	cmdsPerOp    float64
	rpcsPerOp    float64
	scriptsPerOp float64 // script runs per op: the decisions, without a daemon's background writes
	scriptsTop   string  // the commands Redis ran most in a run with scripts (topCommands)
	resyncs      int64   // the fast views' resyncs over the timed runs
	rtPerOp      float64
	cpuPerRPC    time.Duration // the server's CPU per RPC
	cpuMeasured  bool          // cpuPerRPC was read (the server ran in its own process)
	// CPU per op (completed or failed) of a client's driver, the server
	// (when cpuMeasured) and Redis; cores is their sum over the timed
	// runs' wall time.
	clientCPU, serverCPU, redisCPU time.Duration
	cores                          float64
}

func summarize(s scenario, ss []sample, rt float64) row {
	r := row{name: s.name, unit: s.unit, rtPerOp: rt}
	var rates, cmdsPerOp []float64
	var lat []time.Duration
	var scripts, rpcs int64
	var cpu, clientCPU, redisCPU, elapsed time.Duration
	measured := len(ss) > 0
	for _, x := range ss {
		cpu += x.cpu
		clientCPU += x.clientCPU
		redisCPU += x.redisCPU
		elapsed += x.elapsed
		measured = measured && x.hasCPU
		rates = append(rates, x.rate())
		lat = append(lat, x.lat...)
		r.errs += x.errs
		if r.err == nil {
			r.err = x.err
		}
		r.ops += x.ops
		if x.ops > 0 {
			cmdsPerOp = append(cmdsPerOp, float64(x.cmds)/float64(x.ops))
		}
		scripts += x.scripts
		if x.scripts > 0 && r.scriptsTop == "" {
			r.scriptsTop = x.top
		}
		rpcs += x.rpcs
		r.resyncs += x.resyncs
	}
	slices.Sort(lat)
	r.rate = median(rates)
	r.p50, r.p99, r.p999 = quantile(lat, 0.50), quantile(lat, 0.99), quantile(lat, 0.999)
	if r.ops > 0 {
		r.cmdsPerOp = median(cmdsPerOp)
		r.scriptsPerOp = float64(scripts) / float64(r.ops)
		r.rpcsPerOp = float64(rpcs) / float64(r.ops+r.errs)
	}
	if measured && rpcs > 0 {
		r.cpuPerRPC, r.cpuMeasured = cpu/time.Duration(rpcs), true
	}
	if n := time.Duration(r.ops + r.errs); n > 0 {
		r.clientCPU, r.redisCPU = clientCPU/n, redisCPU/n
		if r.cpuMeasured {
			r.serverCPU = cpu / n
		}
	}
	if elapsed > 0 {
		r.cores = float64(clientCPU+redisCPU+cpu) / float64(elapsed)
	}
	return r
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func report(w io.Writer, o Options, run []scenario, samples [][]sample, wireRT []float64, trips [][]time.Duration, skips []string) map[string]row {
	rows := map[string]row{}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "scenario\top\tops/s\tp50 ms\tp99 ms\tp99.9 ms\terrors\tredis cmds/op\tredis RT/op\tRPCs/op\tserver CPU µs/RPC\t")
	for i, s := range run {
		r := summarize(s, samples[i], wireRT[i])
		rows[s.name] = r
		rt := "-"
		if r.rtPerOp != noWirePass {
			rt = fmt.Sprintf("%.2f", r.rtPerOp)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t%s\t%d\t%.2f\t%s\t%.2f\t%s\t\n", r.name, r.unit, r.rate, ms(r.p50), ms(r.p99), ms(r.p999),
			r.errs, r.cmdsPerOp, rt, r.rpcsPerOp, us(r.cpuPerRPC, r.cpuMeasured))
	}
	var all []time.Duration
	for _, ts := range trips {
		all = append(all, ts...)
	}
	if len(all) > 0 {
		slices.Sort(all)
		rows["trip-to-deny"] = row{name: "trip-to-deny", unit: "trips", ops: int64(len(all)),
			p50: quantile(all, 0.5), p99: quantile(all, 0.99), p999: quantile(all, 0.999)}
		fmt.Fprintf(tw, "trip-to-deny\ttrips\t-\t%s\t%s\t%s\t0\t-\t-\t-\t-\t\n", ms(quantile(all, 0.5)), ms(quantile(all, 0.99)), ms(quantile(all, 0.999)))
	}
	_ = tw.Flush()
	for _, s := range skips {
		fmt.Fprintln(w, "  "+s)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "ops/s: median over rounds; latencies: over every op of every round; redis cmds/op: INFO commandstats")
	fmt.Fprintln(w, "(commands inside Lua included) over each timed run, median over rounds; redis RT/op: requests reaching Redis through a")
	fmt.Fprintf(w, "counting proxy, the least of %d sequential passes of %d ops on twin servers; RPCs/op: RPCs the bench sent;\n", wirePasses, o.WirePass)
	fmt.Fprintln(w, "server CPU: user+system time of the server's own process (/proc) over the RPCs sent to it (- when in-process).")
	if len(all) > 0 {
		fmt.Fprintf(w, "trip-to-deny: %d trips on daemon A, each timed from the send of the tripping Record until all %d clients\n", len(all), o.Pollers)
		fmt.Fprintln(w, "connected to daemon B deny, polling Allow without pause (strict mode; fast mode: see above).")
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "strict-mode targets (Redis commands and round trips per pair, errors and p99.9 on one breaker, daemon CPU per RPC):")
	for _, name := range []string{"pair-1k-raw", "pair-hot-raw"} {
		if r, ok := rows[name]; ok {
			fmt.Fprintf(w, "  %s: %.2f Redis commands per pair (target <= 4: %s), %.2f Redis round trips per RPC (target 1: %s)\n",
				name, r.cmdsPerOp, verdict(r.cmdsPerOp <= 4.05), r.rtPerOp/2, verdict(r.rtPerOp/2 <= 1.0))
		}
	}
	if r, ok := rows["pair-hot-raw"]; ok {
		fmt.Fprintf(w, "  pair-hot-raw: %d errors, p99.9 %s ms (target 0 errors and <= 50 ms: %s)\n", r.errs, ms(r.p999), verdict(r.errs == 0 && r.p999 <= 50*time.Millisecond))
	}
	if r, ok := rows["pair-1k-raw"]; ok {
		if c, ok := rows["ceiling"]; ok && r.cpuMeasured && c.cpuPerRPC > 0 {
			x := float64(r.cpuPerRPC) / float64(c.cpuPerRPC)
			fmt.Fprintf(w, "  pair-1k-raw: daemon CPU %s µs per RPC, %.2fx the ceiling server's %s µs (target <= %.1fx: %s)\n",
				us(r.cpuPerRPC, true), x, us(c.cpuPerRPC, true), maxDaemonCPU, verdict(x <= maxDaemonCPU))
		}
		if n, ok := rows["noop"]; ok {
			fmt.Fprintf(w, "  pair-1k-raw p99 %s ms beside the no-op's %s ms\n", ms(r.p99), ms(n.p99))
		}
	}
	pairCPUReport(w, rows)

	fmt.Fprintln(w)
	fmt.Fprintln(w, "counting policies' Redis cost (window and slow-call modes write on every call or every slow success, so the 4-commands target does not apply):")
	for _, c := range []struct{ name, what string }{
		{"pair-1k-window-raw", "mode: window, every call a success"},
		{"pair-1k-slow-raw", fmt.Sprintf("slow_call: 2s, every success %d ms", slowLatencyMs)},
	} {
		if r, ok := rows[c.name]; ok {
			line := fmt.Sprintf("  %s (%s): %.2f Redis commands per pair, %.2f round trips per RPC", c.name, c.what, r.cmdsPerOp, r.rtPerOp/2)
			if b, ok := rows["pair-1k-raw"]; ok && b.cmdsPerOp > 0 {
				line += fmt.Sprintf("; pair-1k-raw: %.2f", b.cmdsPerOp)
			}
			fmt.Fprintln(w, line)
		}
	}

	fastPairReport(w, rows)
	clientCPUReport(w, run, rows)
	traceReport(w, rows)

	fmt.Fprintln(w)
	fmt.Fprintln(w, "ratios of ops/s inside each round (round 1, 2, ...), then their median:")
	idx := map[string]int{}
	for i, s := range run {
		idx[s.name] = i
	}
	for _, q := range ratios {
		ni, ok1 := idx[q.num]
		di, ok2 := idx[q.den]
		if !ok1 || !ok2 {
			continue
		}
		var per []float64
		var cells []string
		for r := range samples[ni] {
			d := samples[di][r].rate()
			if d == 0 {
				continue
			}
			v := samples[ni][r].rate() / d
			per = append(per, v)
			cells = append(cells, fmt.Sprintf("%.2f", v))
		}
		line := fmt.Sprintf("ratio %s / %s: %s  median %.2fx", q.num, q.den, strings.Join(cells, " "), median(per))
		if q.target > 0 {
			line += fmt.Sprintf("  (target >= %.2fx: %s)", q.target, verdict(median(per) >= q.target))
		}
		fmt.Fprintln(w, line)
	}
	return rows
}

// pairCPUReport prints what a strict pair costs the machine beside a
// ceiling RPC, by process: a pair is two RPCs, so at the same cores busy
// it runs at 0.45x the ceiling when it costs at most 1/0.45 = 2.22 times
// the CPU of a ceiling RPC.
func pairCPUReport(w io.Writer, rows map[string]row) {
	c, ok := rows["ceiling"]
	if !ok || !c.cpuMeasured || c.clientCPU <= 0 {
		return
	}
	total := func(r row) time.Duration { return r.clientCPU + r.serverCPU + r.redisCPU }
	for _, name := range []string{"pair-1k-raw", "pair-hot-raw"} {
		r, ok := rows[name]
		if !ok || !r.cpuMeasured || r.clientCPU <= 0 {
			continue
		}
		fmt.Fprintf(w, "  %s: %s µs of CPU per pair (the bench %s, the daemon %s, Redis %s), %.2fx a ceiling RPC's %s (%s, %s, %s); %.2f and %.2f cores busy\n",
			name, us(total(r), true), us(r.clientCPU, true), us(r.serverCPU, true), us(r.redisCPU, true),
			float64(total(r))/float64(total(c)), us(total(c), true), us(c.clientCPU, true), us(c.serverCPU, true), us(c.redisCPU, true),
			r.cores, c.cores)
	}
}

// fastPairReport prints each fastPairTargets row's p50 and verdict.
func fastPairReport(w io.Writer, rows map[string]row) {
	header := false
	for _, t := range fastPairTargets {
		r, ok := rows[t.name]
		if !ok {
			continue
		}
		if !header {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "the clients' fast modes (a healthy pair answered in-process, one caller):")
			header = true
		}
		fmt.Fprintf(w, "  %s: pair p50 %s µs, p99 %s µs (target p50 <= %s µs: %s)\n",
			t.name, us(r.p50, true), us(r.p99, true), us(t.max, true), verdict(r.ops > 0 && r.p50 <= t.max))
	}
}

// asyncScaling is the ratio of Python's asyncio rows that the machine's
// cores bound: clientCPUReport prints how far.
var asyncScaling = ratio{"pair-1k-py-async@8", "pair-1k-py-async@1", 0}

// clientCPUReport prints where the clients' strict pairs spend CPU, by
// process, and what the machine's cores allow asyncScaling: at most
// the cores over the CPU a pair takes at the num's callers, over the
// den's pairs per second.
func clientCPUReport(w io.Writer, run []scenario, rows map[string]row) {
	header := false
	for _, s := range run {
		r, ok := rows[s.name]
		if s.proc == nil || s.proc.mode != "strict" || !ok {
			continue
		}
		if !header {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "the clients' strict pairs, CPU per pair (user+system: the driver's own count, the daemon's process, Redis's INFO cpu;")
			fmt.Fprintf(w, "cores: the three over the timed runs' wall time, of the machine's %d):\n", runtime.NumCPU())
			header = true
		}
		fmt.Fprintf(w, "  %s: driver %s µs, daemon %s µs, Redis %s µs; %.2f cores\n", s.name,
			us(r.clientCPU, true), us(r.serverCPU, r.cpuMeasured), us(r.redisCPU, true), r.cores)
	}
	num, ok1 := rows[asyncScaling.num]
	den, ok2 := rows[asyncScaling.den]
	if !ok1 || !ok2 || !num.cpuMeasured || den.rate == 0 {
		return
	}
	perPair := num.clientCPU + num.serverCPU + num.redisCPU
	if perPair <= 0 {
		return
	}
	most := float64(runtime.NumCPU()) / perPair.Seconds()
	fmt.Fprintf(w, "  %s / %s: at most %.2fx on %d cores (%s's %s µs of CPU per pair fill them at %.0f pairs/s; %s ran %.0f)\n",
		asyncScaling.num, asyncScaling.den, most/den.rate, runtime.NumCPU(), asyncScaling.num, us(perPair, true), most, asyncScaling.den, den.rate)
}

func us(d time.Duration, measured bool) string {
	if !measured {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond))
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
