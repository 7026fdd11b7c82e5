package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/httpapi"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
)

// sseEvent is one Server-Sent Event as a client reads it; a comment line
// (a heartbeat) is an event of type ":".
type sseEvent struct {
	id, typ, data string
}

// json decodes the event's data.
func (e sseEvent) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(e.data), &m); err != nil {
		t.Fatalf("event %s data is not JSON: %v: %s", e.typ, err, e.data)
	}
	return m
}

// sseStream is an open GET /v1/watch.
type sseStream struct {
	c      chan sseEvent
	cancel context.CancelFunc
}

// watch opens GET /v1/watch?query on d with the Last-Event-ID last (if
// any); the stream is closed when the test ends.
func watch(t *testing.T, d *daemontest.Daemon, query url.Values, last, token string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.HTTPAddr+"/v1/watch?"+query.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		a := read(t, res)
		cancel()
		t.Fatalf("GET /v1/watch?%s = %d %s, want 200 text/event-stream", query.Encode(), a.status, a.raw)
	}
	s := &sseStream{c: make(chan sseEvent, 1024), cancel: cancel}
	go func() {
		defer res.Body.Close()
		defer close(s.c)
		sc := bufio.NewScanner(res.Body)
		// An unfiltered snapshot on a shared Redis lists every test's
		// open breakers: one long line.
		sc.Buffer(nil, 64<<20)
		var e sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if e.typ != "" {
					s.c <- e
				}
				e = sseEvent{}
			case strings.HasPrefix(line, ":"):
				s.c <- sseEvent{typ: ":"}
			case strings.HasPrefix(line, "id: "):
				e.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				e.typ = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				e.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	t.Cleanup(cancel)
	return s
}

// next returns the next event that is not a heartbeat.
func (s *sseStream) next(t *testing.T) sseEvent {
	t.Helper()
	for {
		e := s.any(t)
		if e.typ != ":" {
			return e
		}
	}
}

// any returns the next event or heartbeat, failing t if the stream ends
// or stays silent for a minute (a stuck stream, not a timing margin).
func (s *sseStream) any(t *testing.T) sseEvent {
	t.Helper()
	select {
	case e, ok := <-s.c:
		if !ok {
			t.Fatal("the stream ended")
		}
		return e
	case <-time.After(time.Minute):
		t.Fatal("no event for a minute")
	}
	return sseEvent{}
}

// awaitEvent returns the stream's next event of breaker that moves it to
// state to, past any other.
func awaitEvent(t *testing.T, s *sseStream, breaker, to string) sseEvent {
	t.Helper()
	for {
		e := s.next(t)
		if e.typ == "event" && strings.HasPrefix(e.id, breaker+"/") && e.json(t)["to"] == to {
			return e
		}

	}
}

// force forces breaker over HTTP (mode OPEN or CLOSED).
func force(t *testing.T, d *daemontest.Daemon, breaker, mode string) {
	t.Helper()
	a := post(t, d.HTTPAddr, "Force", opToken, fmt.Sprintf(`{"breaker":%q,"mode":"FORCE_MODE_%s","reason":"drill","operator":"alice"}`, breaker, mode))
	if a.status != http.StatusOK {
		t.Fatalf("Force %s %s = %d %s", breaker, mode, a.status, a.raw)
	}
}

// snapshotNames reads a stream's snapshot (snapshotParts) and returns
// the breakers it lists.
func snapshotNames(t *testing.T, s *sseStream) []string {
	t.Helper()
	var names []string
	for _, st := range snapshotParts(t, s) {
		names = append(names, st["breaker"].(string))
	}
	return names
}

// snapshotParts reads a stream's snapshot, its parts up to the one with
// more false, and returns the states it lists, each with its
// deny_until_ms present. Every part announces the stream's heartbeat.
func snapshotParts(t *testing.T, s *sseStream) []map[string]any {
	t.Helper()
	var out []map[string]any
	for more := true; more; {
		e := s.next(t)
		if e.typ != "snapshot" {
			t.Fatalf("event is %q (%s), want a snapshot part", e.typ, e.data)
		}
		m := e.json(t)
		if hb, _ := m["heartbeat_ms"].(string); hb == "" || hb == "0" {
			t.Errorf("snapshot part's heartbeat_ms = %v, want the stream's interval", m["heartbeat_ms"])
		}
		more, _ = m["more"].(bool)
		states, _ := m["states"].([]any)
		for _, s := range states {
			m, _ := s.(map[string]any)
			if _, ok := m["deny_until_ms"]; !ok {
				t.Errorf("snapshot state lacks deny_until_ms: %v", m)
			}
			out = append(out, m)
		}
	}
	return out
}

// TestWatchOverSSE: a stream opens with a snapshot of the breakers that
// deny now (only the named ones with breaker=), relays live events with
// id <breaker>/<stream id>, and sends heartbeats while idle.
func TestWatchOverSSE(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.StartWith(t, b, daemontest.Options{HTTP: &httpapi.Options{Watch: &httpapi.Watch{Heartbeat: 20 * time.Millisecond}}})
		open, closed, other := b.Breaker("open"), b.Breaker("closed"), b.Breaker("other")
		force(t, d, open, "OPEN")
		force(t, d, closed, "CLOSED")
		force(t, d, other, "OPEN")

		named := watch(t, d, url.Values{"breaker": {open, closed}}, "", "")
		if got := snapshotNames(t, named); len(got) != 1 || got[0] != open {
			t.Errorf("snapshot of %s and %s = %v, want only %s (the one denying)", open, closed, got, open)
		}
		all := watch(t, d, nil, "", "")
		got := strings.Join(snapshotNames(t, all), " ")
		if !strings.Contains(got, open) || !strings.Contains(got, other) || strings.Contains(got, closed) {
			t.Errorf("unfiltered snapshot = %s, want %s and %s, not %s", got, open, other, closed)
		}
		// Idle, it sends heartbeats (events of the forces above may still
		// arrive first: on a Cluster the hub hears each node late).
		for e := named.any(t); e.typ != ":"; e = named.any(t) {
			if e.typ != "event" {
				t.Fatalf("before a heartbeat: %q %s", e.typ, e.data)
			}
		}
		force(t, d, closed, "OPEN")
		e := awaitEvent(t, named, closed, "STATE_FORCED_OPEN")
		m := e.json(t)
		if !strings.HasPrefix(e.id, closed+"/") || m["id"] != strings.TrimPrefix(e.id, closed+"/") ||
			m["kind"] != "EVENT_KIND_FORCED" || m["generation"] == nil {
			t.Errorf("live event = id %q %s %s, want event %s/<stream id>, EVENT_KIND_FORCED", e.id, e.typ, e.data, closed)
		}
		// The event carries the state read after it: a cache needs no read.
		if st, _ := m["state"].(map[string]any); st["deny_until_ms"] != strconv.FormatInt(math.MaxInt64, 10) || st["state"] != "STATE_FORCED_OPEN" {
			t.Errorf("live event's state = %v, want STATE_FORCED_OPEN denying until an operator ends it", m["state"])
		}
		if e := awaitEvent(t, all, closed, "STATE_FORCED_OPEN"); e.id != closed+"/"+m["id"].(string) {
			t.Errorf("unfiltered stream's event = %q, want the same %s", e.id, e.id)
		}
	})
}

// TestWatchResumesWithLastEventID: a stream naming its breakers that
// reconnects with Last-Event-ID receives every event it missed, of the
// breaker the id names and of the others, replayed from their logs and
// not the one it had; a position the log no longer holds gets resync.
func TestWatchResumesWithLastEventID(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.StartWith(t, b, daemontest.Options{Store: store.Options{EventsMaxLen: 3},
			HTTP: &httpapi.Options{Watch: &httpapi.Watch{}}})
		x, y := b.Breaker("x"), b.Breaker("y")
		q := url.Values{"breaker": {x, y}}
		s := watch(t, d, q, "", "")
		snapshotNames(t, s)
		force(t, d, x, "OPEN")
		last := s.next(t)
		s.cancel()
		force(t, d, x, "CLOSED")
		force(t, d, y, "OPEN")

		r := watch(t, d, q, last.id, "")
		if got := snapshotNames(t, r); len(got) != 1 || got[0] != y {
			t.Errorf("resumed snapshot = %v, want [%s]", got, y)
		}
		missed := map[string]string{}
		for range 2 {
			e := r.next(t)
			if e.typ != "event" || e.id == last.id {
				t.Fatalf("resumed stream sent %q %q %s, want the 2 missed events (not %s again)", e.typ, e.id, e.data, last.id)
			}
			missed[e.id[:strings.LastIndexByte(e.id, '/')]] = e.json(t)["to"].(string)
		}
		if missed[x] != "STATE_FORCED_CLOSED" || missed[y] != "STATE_FORCED_OPEN" {
			t.Errorf("missed events = %v, want %s forced closed and %s forced open", missed, x, y)
		}
		force(t, d, y, "CLOSED")
		if e := r.next(t); !strings.HasPrefix(e.id, y+"/") || e.json(t)["to"] != "STATE_FORCED_CLOSED" {
			t.Errorf("after the replay, live event = %q %s, want %s forced closed", e.id, e.data, y)
		}

		// x's log is full (3 entries, --events-max-len 3): a position
		// before its oldest entry may have lost events.
		force(t, d, x, "OPEN")
		stale := watch(t, d, url.Values{"breaker": {x}}, x+"/1-0", "")
		snapshotNames(t, stale)
		e := stale.next(t)
		if e.typ != "resync" || !strings.Contains(e.data, x) {
			t.Errorf("a position the log no longer holds: %q %s, want resync naming %s", e.typ, e.data, x)
		}
	})
}

// TestWatchRefusals: a bad query or Last-Event-ID is refused naming it,
// a token's stream cap holds as for gRPC Watch, and a limited token must
// name its breakers.
func TestWatchRefusals(t *testing.T) {
	b := testredis.Mini(t)
	d := daemontest.StartWith(t, b, daemontest.Options{HTTP: &httpapi.Options{Watch: &httpapi.Watch{}}, Watch: events.Limits{PerOwner: 1}})
	for _, tc := range []struct {
		query, last string
		status      int
		field       string
	}{
		{"bogus=1", "", 400, "bogus"},
		{"breaker=" + url.QueryEscape("bad\nname"), "", 400, "breaker[0]"},
		{"run_notices=maybe", "", 400, "run_notices"},
		{"breaker=x", "no-slash", 400, "Last-Event-ID"},
		{"breaker=x", "x/notanid", 400, "Last-Event-ID"},
	} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+d.HTTPAddr+"/v1/watch?"+tc.query, nil)
		if tc.last != "" {
			req.Header.Set("Last-Event-ID", tc.last)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		a := read(t, res)
		res.Body.Close()
		if a.status != tc.status || len(a.violations()) != 1 || a.violations()[0] != tc.field {
			t.Errorf("GET /v1/watch?%s (Last-Event-ID %q) = %d %s, want %d naming %s", tc.query, tc.last, a.status, a.raw, tc.status, tc.field)
		}
	}
	watch(t, d, nil, "", "").next(t)
	refusedWatch(t, d, "a second stream past the per-token cap of 1")
}

// refusedWatch opens GET /v1/watch on d and wants it refused 429
// resource_exhausted (what names the case).
func refusedWatch(t *testing.T, d *daemontest.Daemon, what string) {
	t.Helper()
	res, err := http.Get("http://" + d.HTTPAddr + "/v1/watch")
	if err != nil {
		t.Fatal(err)
	}
	a := read(t, res)
	res.Body.Close()
	if a.status != http.StatusTooManyRequests || a.str("code") != "resource_exhausted" {
		t.Errorf("%s: GET /v1/watch = %d %s, want 429 resource_exhausted", what, a.status, a.raw)
	}
}

// TestWatchSnapshotListsASuspectsBreaker: a breaker that stays closed
// for the fleet but denies its suspect worker (one worker alone failed
// past the threshold) is in every stream's snapshot, the unfiltered one
// included, with the suspect's own denial; a closed breaker with no
// suspect is not.
func TestWatchSnapshotListsASuspectsBreaker(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.StartWith(t, b, daemontest.Options{HTTP: &httpapi.Options{Watch: &httpapi.Watch{}}})
		suspect, healthy := b.Breaker("crm"), b.Breaker("healthy")
		call := func(name, outcome string) {
			t.Helper()
			a := post(t, d.HTTPAddr, "Allow", "", fmt.Sprintf(`{"breaker":%q,"worker_id":"w1"}`, name))
			ticket, _ := json.Marshal(a.json["ticket"])
			if rec := post(t, d.HTTPAddr, "Record", "", fmt.Sprintf(`{"breaker":%q,"worker_id":"w1","outcome":%q,"ticket":%s}`,
				name, outcome, ticket)); rec.status != http.StatusOK {
				t.Fatalf("Record = %d %s", rec.status, rec.raw)
			}
		}
		for range 5 {
			call(suspect, "OUTCOME_SERVER_ERROR")
		}
		call(healthy, "OUTCOME_SERVER_ERROR") // holds state, denies no one
		g := post(t, d.HTTPAddr, "Get", "", fmt.Sprintf(`{"breaker":%q}`, suspect))
		if g.str("state.state") != "STATE_CLOSED" || g.str("state.suspect_worker") != "w1" || g.str("state.suspect_denial.status") != "worker_isolated" {
			t.Fatalf("Get = %s, want STATE_CLOSED with w1 its suspect", g.raw)
		}
		for _, q := range []url.Values{nil, {"breaker": {suspect, healthy}}} {
			states := map[string]map[string]any{}
			for _, st := range snapshotParts(t, watch(t, d, q, "", "")) {
				states[st["breaker"].(string)] = st
			}
			if st := states[suspect]; st == nil || st["suspect_denial"] == nil {
				t.Errorf("snapshot (%v) lists %s as %v, want it with its suspect's denial", q, suspect, st)
			}
			if st := states[healthy]; st != nil {
				t.Errorf("snapshot (%v) lists %s, which denies no one: %v", q, healthy, st)
			}
		}
	})
}
