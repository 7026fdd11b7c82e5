package soak

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/store"
)

// The pulse is the observer's own measure of how promptly each Redis
// node (a Cluster's masters and replicas: one may take over), and the
// host itself, answer. A daemon takes a node as down when a decision has
// waited on it for half its bound and the node then does not answer a
// fresh connection within the other half (store's ask). On
// a host loaded enough (other suites at once on two cores), a node with
// no fault injected can fail that ask, and the daemon rightly answers
// from memory for a moment; without the pulse the observer could not
// tell that from a daemon's mistake. So the pulse PINGs each node on a
// connection of its own every PulseEvery and times its own sleeps; a
// reply, or a wake-up, PulseLate or more late is a late span. A degraded
// answer on a master with no fault injected (live-degraded) and a flip of
// such a master (flapping) are excused, and counted apart, only when a
// late span of that node or of the host ends within LateWindow before
// them. On a host that keeps time, no span exists and both rules hold in
// full.
const (
	PulseEvery = 50 * time.Millisecond
	PulseTick  = 20 * time.Millisecond
	// PulseLate is a quarter of the daemons' bound: half of what their
	// ask of a fresh connection waits.
	PulseLate = DecisionTimeout / 4
	// LateWindow covers a flip's whole making (a decision's bound) and
	// the recovery polls that end a flip once the node answers again.
	LateWindow = 2 * DecisionTimeout
)

// Span is a stretch of time a node (or the host) answered late: a PING
// sent at From and answered (or failed) at To, or a sleep due at From
// that ended at To.
type Span struct{ From, To time.Time }

// Late is the pulse's late spans by node address ("" for the host).
type Late map[string][]Span

// excuses reports whether a late span of node, or of the host, ends
// within LateWindow before t (or goes on at t).
func (l Late) excuses(node string, t time.Time) bool {
	return l.excusesSince(node, t, time.Time{})
}

// excusesSince is excuses, counting only the late spans that began after
// since.
func (l Late) excusesSince(node string, t, since time.Time) bool {
	for _, k := range []string{node, ""} {
		for _, s := range l[k] {
			if s.From.After(since) && !s.From.After(t) && !s.To.Before(t.Add(-LateWindow)) {
				return true
			}
		}
	}
	return false
}

// hostRanLate reports whether the host ran late within [from, to] by as
// much as makes a daemon take itself as late (store's lateness: half its
// decision bound): a late span of the host's own sleeps that long,
// overlapping it. A daemon on such a host rightly takes its decisions'
// silence for its own lateness, and answers its callers late.
func (l Late) hostRanLate(from, to time.Time) bool {
	for _, s := range l[""] {
		if s.To.Sub(s.From) >= store.LateAfter(DecisionTimeout) && !s.From.After(to) && !s.To.Before(from) {
			return true
		}
	}
	return false
}

// String renders the spans for the report: per node, how many and the
// longest.
func (l Late) String() string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		var longest time.Duration
		for _, s := range l[k] {
			longest = max(longest, s.To.Sub(s.From))
		}
		name := k
		if k == "" {
			name = "host (the soak's own sleeps)"
		}
		parts = append(parts, fmt.Sprintf("%s: %d, longest %s", name, len(l[k]), longest.Round(time.Millisecond)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// pulse runs the measures until stop.
type pulse struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	late   Late
}

// startPulse begins pinging nodes (addresses as the daemons reach them)
// and timing the host's sleeps.
func startPulse(nodes []string) *pulse {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pulse{cancel: cancel, late: Late{}}
	for _, a := range nodes {
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.ping(ctx, a) }()
	}
	p.wg.Add(1)
	go func() { defer p.wg.Done(); p.clock(ctx) }()
	return p
}

// stop ends the measures and returns the late spans.
func (p *pulse) stop() Late {
	p.cancel()
	p.wg.Wait()
	return p.late
}

// ping PINGs a every PulseEvery, one at a time, on one connection that
// is dialled again when it fails. Each dial, write and read is bounded by
// DecisionTimeout: a node that stalls shows as spans one after another,
// and stop waits for none past it.
func (p *pulse) ping(ctx context.Context, a string) {
	rc := redis.NewClient(&redis.Options{Addr: a, PoolSize: 1, MaxRetries: -1, ContextTimeoutEnabled: true,
		DialTimeout: DecisionTimeout, ReadTimeout: DecisionTimeout, WriteTimeout: DecisionTimeout})
	defer rc.Close()
	t := time.NewTicker(PulseEvery)
	defer t.Stop()
	for {
		sent := time.Now()
		_ = rc.Ping(ctx).Err() // a refusal is prompt; only lateness counts
		p.note(a, sent, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// clock sleeps PulseTick at a time and notes each wake-up PulseLate late.
func (p *pulse) clock(ctx context.Context) {
	t := time.NewTimer(PulseTick)
	defer t.Stop()
	for {
		due := time.Now().Add(PulseTick)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.note("", due, time.Now())
		t.Reset(PulseTick)
	}
}

// note keeps [from, to] as a late span of node when it is PulseLate or
// longer.
func (p *pulse) note(node string, from, to time.Time) {
	if to.Sub(from) < PulseLate {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.late[node] = append(p.late[node], Span{From: from, To: to})
}

// spans counts the late spans of node so far.
func (p *pulse) spans(node string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.late[node])
}
