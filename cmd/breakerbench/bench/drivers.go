package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A driver runs one client's pairs in a process of its own: the Python
// client's clients/python/bench/driver.py, the TypeScript client's
// clients/typescript/bench/driver.mjs. Each file documents the interface
// (flags; one JSON line out); the bench runs it once per round for the
// row's time against daemon A's HTTP/JSON API.
type driver struct {
	command string // the interpreter, looked up in PATH
	script  string // the driver, from the repository's root
	async   bool   // --async (Python: asyncio tasks instead of threads)
	mode    string // --mode: strict or fast
	callers int    // --callers
	// warmupPairs, when set, is --warmup-pairs in a timed round: untimed
	// pairs before the warm-up's seconds, for a client that a JIT compiles
	// as it runs (docs/performance.md, "The clients' rows").
	warmupPairs int
}

// driverOut is a driver's one line of output.
type driverOut struct {
	Ops      int64   `json:"ops"`
	Errors   int64   `json:"errors"`
	Elapsed  float64 `json:"elapsed_s"`
	Requests *int64  `json:"requests"`
	CPU      float64 `json:"cpu_s"`
	LatUs    []int64 `json:"lat_us"`
	Error    string  `json:"error"`
}

// The drivers, from the repository's root.
const (
	pyDriver = "clients/python/bench/driver.py"
	tsDriver = "clients/typescript/bench/driver.mjs"
)

// skipped is a scenario that cannot run here, and why: its row is
// printed as skipped with the reason.
type skipped struct{ reason string }

func (s skipped) Error() string { return "skipped: " + s.reason }

// clientCallers is how many concurrent callers the clients' rows run
// unless their name says otherwise (@N).
const clientCallers = 16

// driverScenarios are the clients' rows beside Go's: each client strict
// and fast at clientCallers callers and at one (Python async strict with
// 8 too); Go's HTTP/JSON client at the same callers and at 8 (how far
// Go's own client scales here, beside Python async's 8 over 1), and its
// gRPC client at clientCallers.
func driverScenarios() []scenario {
	py, ts := pyDriver, tsDriver
	var out []scenario
	for _, d := range []struct {
		name    string
		command string
		script  string
		async   bool
		callers []int
	}{
		{"pair-1k-py", "python3", py, false, []int{clientCallers, 1}},
		{"pair-1k-py-async", "python3", py, true, []int{clientCallers, 8, 1}},
		{"pair-1k-ts", "node", ts, false, []int{clientCallers, 1}},
	} {
		warm := 0
		if d.command == "node" {
			warm = jitWarmupPairs
		}
		for _, n := range d.callers {
			out = append(out, driverScenario(withCallers(d.name, n), driver{d.command, d.script, d.async, "strict", n, warm}))
		}
		for _, n := range []int{clientCallers, 1} {
			out = append(out, driverScenario(withCallers(d.name+"-fast", n), driver{d.command, d.script, d.async, "fast", n, warm}))
		}
	}
	return append(out,
		scenario{name: "pair-1k-go-http", unit: "pairs", server: ServeDaemon, build: httpPair(spread), callers: clientCallers},
		scenario{name: withCallers("pair-1k-go-http", 8), unit: "pairs", server: ServeDaemon, build: httpPair(spread), callers: 8},
		scenario{name: withCallers("pair-1k-go-http", 1), unit: "pairs", server: ServeDaemon, build: httpPair(spread), callers: 1},
		scenario{name: withCallers("pair-1k-client", clientCallers), unit: "Calls", server: ServeDaemon, build: clientPair(spread), callers: clientCallers})
}

// jitWarmupPairs is the TypeScript driver's --warmup-pairs in a timed
// round.
const jitWarmupPairs = 1500

// withCallers names a row run with n callers when n is not clientCallers.
func withCallers(name string, n int) string {
	if n == clientCallers && !strings.HasPrefix(name, "pair-1k-client") {
		return name
	}
	return name + "@" + strconv.Itoa(n)
}

func driverScenario(name string, d driver) scenario {
	return scenario{name: name, unit: "pairs", server: ServeDaemon, proc: &d, build: func(ctx context.Context, t *target, o Options) (opFunc, error) {
		// Untimed: the interpreter can run the driver, the daemon answers,
		// the mode exists; the breakers learn their first Allow.
		_, err := d.run(ctx, t, o, 300*time.Millisecond, 0, nil)
		return nil, err
	}}
}

// driverRoot is the repository's root, where the drivers are: the
// nearest directory from the working directory up that holds pyDriver.
func driverRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(pyDriver))); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", skipped{"the clients' drivers are not under the working directory (run the bench from the repository)"}
		}
		dir = up
	}
}

// startedLine is the line a driver writes when its warm-up is over; with
// --await-start its timed run starts once the bench has written a line
// to its stdin.
const startedLine = `{"started": true}`

// run runs d against t's daemon for duration (after warmup) and returns
// its sample, or skipped when d's interpreter is not in PATH. begin, when
// set, is called once the driver's warm-up is over, before its timed run
// starts (--await-start).
func (d *driver) run(ctx context.Context, t *target, o Options, duration, warmup time.Duration, begin func() error) (sample, error) {
	if _, err := exec.LookPath(d.command); err != nil {
		return sample{}, skipped{d.command + " is not in PATH"}
	}
	root, err := driverRoot()
	if err != nil {
		return sample{}, err
	}
	if t.httpURL == "" {
		return sample{}, errors.New("no HTTP listener on the daemon")
	}
	args := []string{filepath.Join(root, d.script), "--url", t.httpURL, "--mode", d.mode, "--callers", strconv.Itoa(d.callers),
		"--duration", strconv.FormatFloat(duration.Seconds(), 'f', -1, 64), "--warmup", strconv.FormatFloat(warmup.Seconds(), 'f', -1, 64),
		"--breakers", strconv.Itoa(o.Breakers), "--prefix", t.prefix, "--min-ops", "1"}
	if d.async {
		args = append(args, "--async")
	}
	if d.warmupPairs > 0 && begin != nil {
		args = append(args, "--warmup-pairs", strconv.Itoa(d.warmupPairs))
	}
	if begin != nil {
		args = append(args, "--await-start")
	}
	cmd := exec.CommandContext(ctx, d.command, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	last, started, runErr := runLines(cmd, begin)
	var out driverOut
	if err := json.Unmarshal([]byte(last), &out); err != nil {
		return sample{}, fmt.Errorf("%s %s: %v; no JSON line (%v): %s", d.command, d.script, runErr, err, tail(stderr.String()))
	}
	switch {
	case out.Error != "" || runErr != nil:
		return sample{}, fmt.Errorf("%s %s: %s (%v): %s", d.command, d.script, out.Error, runErr, tail(stderr.String()))
	case begin != nil && !started:
		return sample{}, fmt.Errorf("%s %s: no %s line before its result", d.command, d.script, startedLine)
	}
	s := sample{ops: out.Ops, errs: out.Errors, elapsed: time.Duration(out.Elapsed * float64(time.Second)),
		clientCPU: time.Duration(out.CPU * float64(time.Second))}
	for _, us := range out.LatUs {
		s.lat = append(s.lat, time.Duration(us)*time.Microsecond)
	}
	slices.Sort(s.lat)
	if out.Requests != nil {
		s.rpcs = *out.Requests
	}
	return s, nil
}

// runLines runs cmd, calling begin (when set) at its first startedLine
// and then writing a line to cmd's stdin (the driver's --await-start),
// and returns its last line of output and whether startedLine came. An
// error of begin stops cmd and is returned.
func runLines(cmd *exec.Cmd, begin func() error) (last string, started bool, err error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", false, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", false, err
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		return "", false, err
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<30) // the result's latencies: one number per pair
	var beginErr error
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == startedLine && !started:
			started = true
			if begin == nil {
				break
			}
			if beginErr = begin(); beginErr != nil {
				_ = cmd.Process.Kill()
			}
			_, _ = io.WriteString(stdin, "go\n") // a driver gone has its error in its output
		case line != "":
			last = line
		}
	}
	err = cmd.Wait()
	if beginErr != nil {
		err = beginErr
	} else if err == nil {
		err = sc.Err()
	}
	return last, started, err
}

// tail is the last lines of a driver's stderr, for an error.
func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}
