package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"time"
)

// The trip to a client's fast view in another language: a driver in
// --watch mode (drivers.go) on daemon B's HTTP/JSON API follows each
// breaker the bench names, and says when its fast view first denies it
// after the bench trips it on daemon A. Both run on one machine, so the
// driver's Unix time and the bench's agree.

// watchTrip is one client's propagation row: trip-<py|ts>-fast.
type watchTrip struct {
	name    string
	command string
	script  string
}

// watchTrips are the rows, one per client with a fast mode.
var watchTrips = []watchTrip{
	{"trip-py-fast", "python3", pyDriver},
	{"trip-ts-fast", "node", tsDriver},
}

// watchResult is a row's trips over every round, or why it was skipped.
type watchResult struct {
	trips []time.Duration
	skip  string
}

// watchRound runs round's trips for each selected row into rows.
func (e *env) watchRound(ctx context.Context, o Options, round int, rows map[string]*watchResult) error {
	for _, wt := range watchTrips {
		if o.Trips == 0 || !selected(o.Only, wt.name) {
			continue
		}
		ts, err := e.watchPropagation(ctx, o, round, wt)
		if rows[wt.name] == nil {
			rows[wt.name] = &watchResult{}
		}
		var skip skipped
		switch {
		case errors.As(err, &skip):
			rows[wt.name].skip = skip.reason
		case err != nil:
			return err
		}
		rows[wt.name].trips = append(rows[wt.name].trips, ts...)
	}
	return nil
}

// watcher is a running --watch driver: its stdin, and its stdout's lines.
type watcher struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	stderr bytes.Buffer
}

// watchLine is one line a watcher prints.
type watchLine struct {
	Ready  string `json:"ready"`
	Denied string `json:"denied"`
	AtUs   int64  `json:"at_us"`
	Trips  *int   `json:"trips"`
	Error  string `json:"error"`
}

// watchPropagation times o.Trips trips on daemon A, each seen by wt's
// driver on daemon B; skipped when its interpreter is not in PATH.
func (e *env) watchPropagation(ctx context.Context, o Options, round int, wt watchTrip) ([]time.Duration, error) {
	if _, err := exec.LookPath(wt.command); err != nil {
		return nil, skipped{wt.command + " is not in PATH"}
	}
	root, err := driverRoot()
	if err != nil {
		return nil, err
	}
	w, err := startWatcher(ctx, wt.command, filepath.Join(root, wt.script), e.daemonBURL)
	if err != nil {
		return nil, err
	}
	defer w.stop()
	var out []time.Duration
	for k := range o.Trips {
		d, err := e.watchOnce(ctx, w, e.main.breaker(fmt.Sprintf("%s-%d-%d", wt.name, round, k)))
		if err != nil {
			w.stop()
			return nil, fmt.Errorf("%s: %w%s", wt.name, err, w.tail())
		}
		out = append(out, d)
	}
	if err := w.finish(ctx, o.Trips); err != nil {
		w.stop()
		return nil, fmt.Errorf("%s: %w%s", wt.name, err, w.tail())
	}
	return out, nil
}

// watchOnce has w follow name, trips it on daemon A and returns how long
// after the tripping Record's send w's view denied it.
func (e *env) watchOnce(ctx context.Context, w *watcher, name string) (time.Duration, error) {
	if _, err := fmt.Fprintln(w.in, name); err != nil {
		return 0, err
	}
	if l, err := w.next(ctx); err != nil || l.Ready != name {
		return 0, errors.Join(err, fmt.Errorf("want ready %q, got %+v", name, l))
	}
	t0, _, err := e.tripOnA(ctx, name)
	if err != nil {
		return 0, err
	}
	l, err := w.next(ctx)
	if err != nil || l.Denied != name {
		return 0, errors.Join(err, fmt.Errorf("want denied %q, got %+v", name, l))
	}
	return max(time.UnixMicro(l.AtUs).Sub(t0), 0), nil
}

// startWatcher runs script under command in --watch mode against url.
func startWatcher(ctx context.Context, command, script, url string) (*watcher, error) {
	w := &watcher{cmd: exec.CommandContext(ctx, command, script, "--url", url, "--watch"), lines: make(chan string, 4)}
	w.cmd.Stderr = &w.stderr
	in, err := w.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	w.in = in
	go func() {
		defer close(w.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
	}()
	return w, nil
}

// next is w's next line, waited for at most tripWait (or ctx's deadline).
func (w *watcher) next(ctx context.Context) (watchLine, error) {
	t := time.NewTimer(settle(ctx, tripWait))
	defer t.Stop()
	var l watchLine
	select {
	case s, ok := <-w.lines:
		if !ok {
			return l, errors.New("the driver ended")
		}
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			return l, fmt.Errorf("not a JSON line: %q", s)
		}
		if l.Error != "" {
			return l, errors.New(l.Error)
		}
		return l, nil
	case <-t.C:
		return l, errors.New("no line from the driver within the wait")
	case <-ctx.Done():
		return l, ctx.Err()
	}
}

// finish ends w's stdin and checks its last line counts trips.
func (w *watcher) finish(ctx context.Context, trips int) error {
	_ = w.in.Close()
	l, err := w.next(ctx)
	if err == nil && (l.Trips == nil || *l.Trips != trips) {
		err = fmt.Errorf("want {\"trips\": %d}, got %+v", trips, l)
	}
	return err
}

// stop ends w: its stdin closed, then its process killed if still there.
// A second stop does nothing more.
func (w *watcher) stop() {
	_ = w.in.Close()
	_ = w.cmd.Process.Kill()
	for range w.lines { // the reader ends at the pipe's close
	}
	_ = w.cmd.Wait()
}

// tail is w's last lines of stderr, for an error once w has stopped.
func (w *watcher) tail() string {
	if t := tail(w.stderr.String()); t != "" {
		return ": " + t
	}
	return ""
}

// watchReport prints each row's trips against the fast view's target.
func watchReport(w io.Writer, rows map[string]*watchResult) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "the other clients' fast modes: a trip on daemon A reaching a Python or TypeScript client's view on daemon B (--watch drivers):")
	for _, wt := range watchTrips {
		r := rows[wt.name]
		switch {
		case r == nil:
		case r.skip != "":
			fmt.Fprintf(w, "  %s: skipped: %s\n", wt.name, r.skip)
		case len(r.trips) > 0:
			d := slices.Sorted(slices.Values(r.trips))
			fmt.Fprintf(w, "  %s: %d trips on daemon A seen by the %s client's fast view on daemon B: p50 %s ms, p99 %s ms (target p99 <= 10 ms: %s)\n",
				wt.name, len(d), wt.command, ms(quantile(d, 0.5)), ms(quantile(d, 0.99)), verdict(quantile(d, 0.99) <= 10*time.Millisecond))
		}
	}
}
