package replay

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/breakerd/breakerd/pkg/client"
)

// clock is the replay's time: incident time since the outage began. It
// is safe for concurrent use; start sets the outage's beginning.
//
// A wall clock runs scale times faster than the wall: the mode of a replay
// against an external daemon, which decides on its own Redis's clock, so a
// busy machine falls behind the schedule (reported as lag).
//
// A virtual clock (the in-process daemon's mode, whose scripts decide on
// wall()) moves only when every actor (each goroutine that sleeps on it:
// the arrivals and the runs) is asleep, straight to the earliest wake-up.
// The replay then comes out the same on an idle or a busy machine: nothing
// ever waits on a timer, and nobody is ever late.
type clock struct {
	scale float64
	t0    atomic.Int64 // wall mode: wall clock at start, Unix nanoseconds

	virtual  bool
	epoch    time.Time // virtual mode: wall() at incident time 0
	mu       sync.Mutex
	vnow     time.Duration // virtual mode: incident time now
	active   int           // actors awake
	sleepers []*sleeper
}

type sleeper struct {
	at   time.Duration
	wake chan struct{}
}

func newClock(scale float64) *clock {
	c := &clock{scale: scale}
	c.start()
	return c
}

// newVirtualClock returns a virtual clock at incident time 0.
func newVirtualClock(scale float64) *clock {
	return &clock{scale: scale, virtual: true, epoch: time.Now()}
}

// start makes now the outage's beginning (a virtual clock is at 0 until
// its actors sleep).
func (c *clock) start() { c.t0.Store(time.Now().UnixNano()) }

// now is the incident time since the outage began.
func (c *clock) now() time.Duration {
	if c.virtual {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.vnow
	}
	return time.Duration(float64(time.Now().UnixNano()-c.t0.Load()) * c.scale)
}

// wall is the scaled time the in-process daemon decides by: incident time
// divided by scale, from when the clock was made. Only for a virtual clock.
func (c *clock) wall() time.Time {
	return c.epoch.Add(time.Duration(float64(c.now()) / c.scale))
}

// incident converts a time on wall()'s scale back to incident time. Only
// for a virtual clock.
func (c *clock) incident(t time.Time) time.Duration {
	return time.Duration(float64(t.Sub(c.epoch)) * c.scale)
}

// join registers an actor, awake, before its goroutine starts: a virtual
// clock does not move while an actor is awake. leave unregisters it when
// it ends. Both do nothing on a wall clock.
func (c *clock) join() {
	if c.virtual {
		c.mu.Lock()
		c.active++
		c.mu.Unlock()
	}
}

func (c *clock) leave() {
	if c.virtual {
		c.mu.Lock()
		c.active--
		c.advance()
		c.mu.Unlock()
	}
}

// advance moves a virtual clock, once no actor is awake, to the earliest
// wake-up and wakes every actor due then. c.mu is held.
func (c *clock) advance() {
	if c.active > 0 || len(c.sleepers) == 0 {
		return
	}
	next := c.sleepers[0].at
	for _, s := range c.sleepers {
		next = min(next, s.at)
	}
	c.vnow = next
	keep := c.sleepers[:0]
	for _, s := range c.sleepers {
		if s.at <= c.vnow {
			close(s.wake)
			c.active++
		} else {
			keep = append(keep, s)
		}
	}
	c.sleepers = keep
}

// sleepUntil waits until incident time at, or until ctx ends. On a
// virtual clock only an actor (see join) may call it.
func (c *clock) sleepUntil(ctx context.Context, at time.Duration) error {
	if c.virtual {
		return c.sleepVirtual(ctx, at)
	}
	d := time.Duration(float64(at-c.now()) / c.scale)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *clock) sleepVirtual(ctx context.Context, at time.Duration) error {
	c.mu.Lock()
	if at <= c.vnow {
		c.mu.Unlock()
		return ctx.Err()
	}
	s := &sleeper{at: at, wake: make(chan struct{})}
	c.sleepers = append(c.sleepers, s)
	c.active--
	c.advance()
	c.mu.Unlock()
	select {
	case <-s.wake:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		if i := slices.Index(c.sleepers, s); i >= 0 {
			c.sleepers = slices.Delete(c.sleepers, i, i+1)
			c.active++ // awake again, to return; advance woke the others
		}
		c.mu.Unlock()
		return ctx.Err()
	}
}

// Request headers that tell the vendor which run and which of its calls an
// attempt belongs to, so that its counts can be split by run.
const (
	headerRun  = "X-Replay-Run"
	headerCall = "X-Replay-Call"
	// headerAt is when the replay scheduled the attempt, incident ms.
	headerAt = "X-Replay-At"
	// headerTook, on an answer, is how long the vendor took to give it,
	// incident ms (a slow outage).
	headerTook = "X-Replay-Took"
)

// vendor is the fake search vendor: an HTTP server on loopback that
// answers 503 to every request during the outage and 200 after it, and
// counts what reaches it. It is the witness for the "calls" and "HTTP
// attempts" columns. It judges an attempt by the time the replay
// scheduled it (a header), not by when it arrived, so that a busy
// machine's late timer cannot carry an attempt across the outage's end.
type vendor struct {
	srv    *httptest.Server
	hc     *http.Client
	clk    *clock
	outage time.Duration
	// failRate is the share of calls that fail during the outage
	// (Config.FailRate); fails decides which.
	failRate float64
	// slowBy, when positive, makes the outage slow (Config.SlowOutage):
	// every attempt during it succeeds after slowBy, incident time.
	slowBy time.Duration

	mu   sync.Mutex
	runs map[int]*vendorRun
	bad  int // requests without a run header
	// status are the incident times of the requests to the cheap status
	// endpoint (/status, for recovery checks), in arrival order.
	status []time.Duration
}

// vendorRun is what the vendor saw of one run.
type vendorRun struct {
	attempts int
	calls    map[int]bool // call numbers seen
	served   bool         // a 200 was sent
}

func newVendor(clk *clock, cfg Config) *vendor {
	v := &vendor{clk: clk, outage: cfg.Outage, failRate: cfg.FailRate, slowBy: cfg.SlowOutage, runs: map[int]*vendorRun{}}
	v.srv = httptest.NewServer(http.HandlerFunc(v.serve))
	v.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute}}
	return v
}

func (v *vendor) close() {
	v.hc.CloseIdleConnections()
	v.srv.Close()
}

func (v *vendor) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/status" {
		v.serveStatus(w)
		return
	}
	run, err1 := strconv.Atoi(r.Header.Get(headerRun))
	call, err2 := strconv.Atoi(r.Header.Get(headerCall))
	at, err3 := strconv.ParseInt(r.Header.Get(headerAt), 10, 64)
	during := time.Duration(at)*time.Millisecond < v.outage
	down := during && v.slowBy == 0 && fails(run, call, v.failRate)
	v.mu.Lock()
	if err1 != nil || err2 != nil || err3 != nil {
		down = true
		v.bad++
	} else {
		vr := v.runs[run]
		if vr == nil {
			vr = &vendorRun{calls: map[int]bool{}}
			v.runs[run] = vr
		}
		vr.attempts++
		vr.calls[call] = true
		vr.served = vr.served || !down
	}
	v.mu.Unlock()
	if down {
		http.Error(w, "search backend unavailable", http.StatusServiceUnavailable)
		return
	}
	if during && v.slowBy > 0 {
		// The replay's clock, not this handler, makes the answer late:
		// the header says by how much (incident ms).
		w.Header().Set(headerTook, strconv.FormatInt(v.slowBy.Milliseconds(), 10))
	}
	_, _ = io.WriteString(w, `{"results":[{"title":"...","url":"https://example.com/"}]}`)
}

// fails reports whether the outage fails call number call of run: always
// at rate 1, else when a hash of the two, read as a fraction in [0, 1),
// is below rate. Every attempt of a call gets the same answer, and every
// arm (each with its own vendor) sees the same calls fail.
func fails(run, call int, rate float64) bool {
	if rate >= 1 {
		return true
	}
	// SplitMix64's finaliser (Steele, Lea and Flood, "Fast splittable
	// pseudorandom number generators", OOPSLA 2014): neighbouring inputs
	// give unrelated outputs.
	z := uint64(run)<<32 | uint64(uint32(call))
	z += 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11)/(1<<53) < rate
}

// serveStatus is the cheap status endpoint: 503 during the outage, 200
// after, judged by the replay's clock when the request arrives (the
// recovery check's actor is awake then, so a virtual clock stands still).
func (v *vendor) serveStatus(w http.ResponseWriter) {
	now := v.clk.now()
	v.mu.Lock()
	v.status = append(v.status, now)
	v.mu.Unlock()
	if now < v.outage {
		http.Error(w, "search backend unavailable", http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, `{"status":"ok"}`)
}

// statusSeen returns the incident times of the status requests.
func (v *vendor) statusSeen() []time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := slices.Clone(v.status)
	slices.Sort(out)
	return out
}

// seen returns what the vendor saw of run (zero when nothing).
func (v *vendor) seen(run int) (calls, attempts int, served bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	vr := v.runs[run]
	if vr == nil {
		return 0, 0, false
	}
	return len(vr.calls), vr.attempts, vr.served
}

// search is one web_search call starting at incident time start: up to
// attempts HTTP attempts, at start and then evenly spaced over callTime.
// It returns at the first 200, and after the last attempt's slot with the
// last failure (a *client.HTTPError for a 503, which
// client.DefaultClassifier counts as SERVER_ERROR); end is when, on the
// call's own schedule, it returned. The schedule is anchored to start, so
// a busy machine's scheduling delays do not add up over a run.
func (v *vendor) search(ctx context.Context, run, call, attempts int, callTime, start time.Duration) (end time.Duration, err error) {
	spacing := callTime / time.Duration(attempts)
	for a := range attempts {
		at := start + time.Duration(a)*spacing
		if err := v.clk.sleepUntil(ctx, at); err != nil {
			return at, err
		}
		var took time.Duration
		if took, err = v.attempt(ctx, run, call, at); err == nil {
			// A slow answer arrives took later, on the replay's clock.
			if err := v.clk.sleepUntil(ctx, at+took); err != nil {
				return at + took, err
			}
			return at + took, nil
		}
	}
	if err := v.clk.sleepUntil(ctx, start+callTime); err != nil {
		return start + callTime, err
	}
	return start + callTime, err
}

// attempt sends one HTTP attempt scheduled at at, and returns how long
// the vendor says its answer took (0 unless the outage is slow).
func (v *vendor) attempt(ctx context.Context, run, call int, at time.Duration) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.srv.URL+"/search", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set(headerRun, strconv.Itoa(run))
	req.Header.Set(headerCall, strconv.Itoa(call))
	req.Header.Set(headerAt, strconv.FormatInt(at.Milliseconds(), 10))
	resp, err := v.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	ms, _ := strconv.ParseInt(resp.Header.Get(headerTook), 10, 64)
	return time.Duration(ms) * time.Millisecond, client.CheckResponse(resp)
}

// replayClock is the replay's time as pkg/client reads it
// (client.WithClock), so that a call's latency is measured on the clock
// breakerd decides by: on a virtual clock its wall(), else the wall clock
// (an external daemon's, scale times faster than the incident).
type replayClock struct{ c *clock }

func (r replayClock) Now() time.Time {
	if r.c.virtual {
		return r.c.wall()
	}
	return time.Now()
}
