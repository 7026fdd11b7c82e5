package replay

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/breakerd/breakerd/pkg/client"
)

// clock is the replay's time: incident time since the outage began,
// running Scale times faster than the wall clock.
type clock struct {
	t0    time.Time
	scale float64
}

// now is the incident time since the outage began.
func (c clock) now() time.Duration {
	return time.Duration(float64(time.Since(c.t0)) * c.scale)
}

// sleepUntil waits until incident time at, or until ctx ends.
func (c clock) sleepUntil(ctx context.Context, at time.Duration) error {
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

func (c clock) sleep(ctx context.Context, d time.Duration) error {
	return c.sleepUntil(ctx, c.now()+d)
}

// Request headers that tell the vendor which run and which of its calls an
// attempt belongs to, so that its counts can be split by run.
const (
	headerRun  = "X-Replay-Run"
	headerCall = "X-Replay-Call"
)

// vendor is the fake search vendor: an HTTP server on loopback that
// answers 503 to every request during the outage and 200 after it, and
// counts what reaches it. It is the witness for the "calls" and "HTTP
// attempts" columns.
type vendor struct {
	srv    *httptest.Server
	hc     *http.Client
	clk    clock
	outage time.Duration

	mu   sync.Mutex
	runs map[int]*vendorRun
	bad  int // requests without a run header
}

// vendorRun is what the vendor saw of one run.
type vendorRun struct {
	attempts int
	calls    map[int]bool // call numbers seen
	served   bool         // a 200 was sent
}

func newVendor(clk clock, outage time.Duration) *vendor {
	v := &vendor{clk: clk, outage: outage, runs: map[int]*vendorRun{}}
	v.srv = httptest.NewServer(http.HandlerFunc(v.serve))
	v.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute}}
	return v
}

func (v *vendor) close() {
	v.hc.CloseIdleConnections()
	v.srv.Close()
}

func (v *vendor) serve(w http.ResponseWriter, r *http.Request) {
	down := v.clk.now() < v.outage
	run, err1 := strconv.Atoi(r.Header.Get(headerRun))
	call, err2 := strconv.Atoi(r.Header.Get(headerCall))
	v.mu.Lock()
	if err1 != nil || err2 != nil {
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
	_, _ = io.WriteString(w, `{"results":[{"title":"...","url":"https://example.com/"}]}`)
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

// search is one web_search call: up to attempts HTTP attempts, evenly
// spaced over callTime; it returns at the first 200, and after the last
// attempt's slot with the last failure (a *client.HTTPError for a 503,
// which client.DefaultClassifier counts as SERVER_ERROR).
func (v *vendor) search(ctx context.Context, run, call, attempts int, callTime time.Duration) error {
	start := v.clk.now()
	spacing := callTime / time.Duration(attempts)
	var err error
	for a := range attempts {
		if err := v.clk.sleepUntil(ctx, start+time.Duration(a)*spacing); err != nil {
			return err
		}
		if err = v.attempt(ctx, run, call); err == nil {
			return nil
		}
	}
	if err := v.clk.sleepUntil(ctx, start+callTime); err != nil {
		return err
	}
	return err
}

func (v *vendor) attempt(ctx context.Context, run, call int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.srv.URL+"/search", nil)
	if err != nil {
		return err
	}
	req.Header.Set(headerRun, strconv.Itoa(run))
	req.Header.Set(headerCall, strconv.Itoa(call))
	resp, err := v.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return client.CheckResponse(resp)
}
