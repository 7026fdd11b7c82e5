package breaker

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/breakerd/breakerd/internal/quorum"
)

// Window mode (a policy's `mode: window`): instead of a run of consecutive
// failures, a breaker trips on its failure rate over a sliding time
// window, kept in WindowBuckets buckets of Params.WindowMs/WindowBuckets
// ms each. A bucket is floor(now / bucket length) on the fleet's clock
// (Redis TIME): no worker's or daemon's clock decides one.
//
// The rules, on a closed breaker (automatic, or pinned closed: counted,
// never tripped) and a current ticket:
//   - a success is one call; a counted failure (quorum.Evidence.Counted:
//     errors, timeouts, 5xx, a 429 beyond the deadline) is one call and
//     one failure, from its worker; a 429 within the deadline and the
//     outcomes that never count are neither. Denied calls send no
//     Record, so they are neither either.
//   - after a failure, with calls >= MinCalls and failures >=
//     FailureRate * calls (the rate exactly at the limit trips), the
//     breaker opens when the window's failures came from >= min_workers
//     distinct workers; when they all came from one worker, that worker
//     is a suspect (denied for one cooldown), as in consecutive mode.
//   - the window belongs to a generation: after any transition (every
//     transition bumps it) the window starts empty.
//   - rate_limit_trips and threshold do not apply.
//   - slow calls (slow_call, slow_call_rate) are a rate of their own over
//     the same window: slow.go.
//
// Window mode writes on every call: a healthy breaker holds its window's
// key (brk:{name}:win), unlike consecutive mode.

// WindowBuckets is how many buckets a window is kept in.
const WindowBuckets = 6

// Window is a breaker's window (the hash brk:{name}:win): the generation
// it belongs to, calls, failures and slow calls per bucket, and each
// failing (slow) worker's last failing (slow) bucket.
type Window struct {
	Gen         int64
	Calls       map[int64]int64
	Fails       map[int64]int64
	Workers     map[string]int64
	Slow        map[int64]int64
	SlowWorkers map[string]int64
}

// WindowTotals is what a window holds at a moment.
type WindowTotals struct {
	Calls, Fails, Slow int64
	// Workers are the distinct workers behind Fails, sorted; SlowWorkers
	// those behind Slow.
	Workers, SlowWorkers []string
}

func emptyWindow(gen int64) Window {
	return Window{Gen: gen, Calls: map[int64]int64{}, Fails: map[int64]int64{}, Workers: map[string]int64{},
		Slow: map[int64]int64{}, SlowWorkers: map[string]int64{}}
}

// live returns w as it stands at bucket cur for generation gen: empty
// when it belongs to another generation, else without the buckets and
// workers that fell out of the window.
func (w Window) live(gen, cur int64) Window {
	out := emptyWindow(gen)
	if w.Gen != gen {
		return out
	}
	first := cur - WindowBuckets + 1
	for _, m := range []struct{ from, to map[int64]int64 }{{w.Calls, out.Calls}, {w.Fails, out.Fails}, {w.Slow, out.Slow}} {
		for b, n := range m.from {
			if b >= first {
				m.to[b] = n
			}
		}
	}
	for _, m := range []struct{ from, to map[string]int64 }{{w.Workers, out.Workers}, {w.SlowWorkers, out.SlowWorkers}} {
		for k, b := range m.from {
			if b >= first {
				m.to[k] = b
			}
		}
	}
	return out
}

func (w Window) totals() WindowTotals {
	var t WindowTotals
	for _, n := range w.Calls {
		t.Calls += n
	}
	for _, n := range w.Fails {
		t.Fails += n
	}
	for _, n := range w.Slow {
		t.Slow += n
	}
	t.Workers = slices.Sorted(maps.Keys(w.Workers))
	t.SlowWorkers = slices.Sorted(maps.Keys(w.SlowWorkers))
	return t
}

// bucketOf is the bucket holding now for a window of windowMs.
func bucketOf(now, windowMs int64) int64 { return now / max(1, windowMs/WindowBuckets) }

// WindowOf returns the window's totals at now for a breaker in state s
// under a window of windowMs (0: consecutive mode, no window).
func WindowOf(s State, windowMs, now int64) WindowTotals {
	if windowMs <= 0 {
		return WindowTotals{}
	}
	return s.Win.live(s.Gen, bucketOf(now, windowMs)).totals()
}

// WindowFromFields reads the hash brk:{name}:win (see Window).
// Malformed entries are skipped.
func WindowFromFields(f map[string]string) Window {
	w := emptyWindow(0)
	for k, v := range f {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		switch {
		case k == "gen":
			w.Gen = n
		case strings.HasPrefix(k, "w:"):
			w.Workers[k[2:]] = n
		case strings.HasPrefix(k, "v:"):
			w.SlowWorkers[k[2:]] = n
		case strings.HasPrefix(k, "s"):
			if b, err := strconv.ParseInt(k[1:], 10, 64); err == nil {
				w.Slow[b] = n
			}
		case strings.HasPrefix(k, "c"):
			if b, err := strconv.ParseInt(k[1:], 10, 64); err == nil {
				w.Calls[b] = n
			}
		case strings.HasPrefix(k, "f"):
			if b, err := strconv.ParseInt(k[1:], 10, 64); err == nil {
				w.Fails[b] = n
			}
		}
	}
	return w
}

// keepWorker sets worker's last bucket to cur in a window's live workers,
// unless it is new there and they already number keep (quorum.Rule.Keep).
func keepWorker(workers map[string]int64, worker string, cur, keep int64) {
	if _, ok := workers[worker]; ok || int64(len(workers)) < keep {
		workers[worker] = cur
	}
}

// windowRecord applies a Record to a closed breaker in window mode with a
// current ticket.
func (st *step) windowRecord() {
	s, c, now, ev := &st.s, st.c, st.now, st.c.Evidence
	failed := false
	switch {
	case ev.Counted():
		failed = true
	case ev == quorum.Healthy:
	case ev == quorum.Throttled:
		st.res.Note = NoteThrottled
		return
	default:
		st.res.Note = NoteNeutral
		return
	}
	slow := !failed && st.slow()
	cur := bucketOf(now, st.p.WindowMs)
	w := s.Win.live(s.Gen, cur)
	w.Calls[cur]++
	keep := st.p.Rule.Keep()
	if failed {
		w.Fails[cur]++
		keepWorker(w.Workers, c.Actor, cur, keep)
	}
	if slow {
		w.Slow[cur]++
		keepWorker(w.SlowWorkers, c.Actor, cur, keep)
	}
	s.Win = w
	st.res.Counted, st.res.Windowed = true, true
	if slow {
		s.SlowLat = pushSample(s.SlowLat, c.Latency)
		st.res.Wrote = true
		if s.Force == "closed" || st.p.SlowCallRate <= 0 {
			return
		}
		t := w.totals()
		if t.Calls < st.p.MinCalls || float64(t.Slow) < st.p.SlowCallRate*float64(t.Calls) {
			return
		}
		st.slowTrip(t.Slow, t.Calls, t.SlowWorkers)
		return
	}
	if !failed {
		return
	}
	s.Last = c.Last
	st.res.Wrote = true
	if s.Force == "closed" {
		return
	}
	t := w.totals()
	if t.Calls < st.p.MinCalls || float64(t.Fails) < st.p.FailureRate*float64(t.Calls) {
		return
	}
	switch st.p.Rule.Reached(int64(len(t.Workers))) {
	case quorum.TripCount:
		if st.capTrip(CauseWindow) {
			return
		}
		s.Fails, s.Workers = t.Fails, t.Workers
		st.trip(CauseWindow)
	case quorum.Suspect:
		s.Fails, s.Cause = t.Fails, CauseWindowSuspect
		st.suspect(CauseWindowSuspect)
	}
}
