package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
}

// driverOut is a driver's one line of output.
type driverOut struct {
	Ops      int64   `json:"ops"`
	Errors   int64   `json:"errors"`
	Elapsed  float64 `json:"elapsed_s"`
	Requests *int64  `json:"requests"`
	LatUs    []int64 `json:"lat_us"`
	Skipped  string  `json:"skipped"`
	Error    string  `json:"error"`
}

// skipped is a scenario that cannot run here, and why: its row is
// printed as skipped with the reason.
type skipped struct{ reason string }

func (s skipped) Error() string { return "skipped: " + s.reason }

// clientCallers is how many concurrent callers the clients' rows run
// unless their name says otherwise (@N).
const clientCallers = 16

// driverScenarios are the clients' rows beside Go's: each client strict
// and fast at clientCallers callers, and strict with one caller (Python
// async with 8 too); Go's HTTP/JSON and gRPC client at the same callers.
func driverScenarios() []scenario {
	py, ts := "clients/python/bench/driver.py", "clients/typescript/bench/driver.mjs"
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
		for _, n := range d.callers {
			out = append(out, driverScenario(withCallers(d.name, n), driver{d.command, d.script, d.async, "strict", n}))
		}
		out = append(out, driverScenario(d.name+"-fast", driver{d.command, d.script, d.async, "fast", clientCallers}))
	}
	return append(out,
		scenario{name: "pair-1k-go-http", unit: "pairs", server: ServeDaemon, build: httpPair(spread), callers: clientCallers},
		scenario{name: withCallers("pair-1k-go-http", 1), unit: "pairs", server: ServeDaemon, build: httpPair(spread), callers: 1},
		scenario{name: withCallers("pair-1k-client", clientCallers), unit: "Calls", server: ServeDaemon, build: clientPair(spread), callers: clientCallers})
}

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
		_, err := d.run(ctx, t, o, 300*time.Millisecond, 0)
		return nil, err
	}}
}

// driverRoot is the repository's root, where the drivers are: the
// nearest directory from the working directory up that holds
// clients/python/bench/driver.py.
func driverRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "clients", "python", "bench", "driver.py")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", skipped{"the clients' drivers are not under the working directory (run the bench from the repository)"}
		}
		dir = up
	}
}

// run runs d against t's daemon for duration (after warmup) and returns
// its sample; a driver that reports a skip returns skipped.
func (d *driver) run(ctx context.Context, t *target, o Options, duration, warmup time.Duration) (sample, error) {
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
	cmd := exec.CommandContext(ctx, d.command, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var out driverOut
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &out); err != nil {
		return sample{}, fmt.Errorf("%s %s: %v; no JSON line (%v): %s", d.command, d.script, runErr, err, tail(stderr.String()))
	}
	switch {
	case out.Skipped != "":
		return sample{}, skipped{out.Skipped}
	case out.Error != "" || runErr != nil:
		return sample{}, fmt.Errorf("%s %s: %s (%v): %s", d.command, d.script, out.Error, runErr, tail(stderr.String()))
	}
	s := sample{ops: out.Ops, errs: out.Errors, elapsed: time.Duration(out.Elapsed * float64(time.Second))}
	for _, us := range out.LatUs {
		s.lat = append(s.lat, time.Duration(us)*time.Microsecond)
	}
	slices.Sort(s.lat)
	if out.Requests != nil {
		s.rpcs = *out.Requests
	}
	return s, nil
}

// tail is the last lines of a driver's stderr, for an error.
func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}
