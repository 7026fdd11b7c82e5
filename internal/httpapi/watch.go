package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/store"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Watch serves GET /v1/watch: the live events as Server-Sent Events.
type Watch struct {
	// Hub feeds the live events, within its per-token stream caps.
	Hub *events.Hub
	// Store answers the snapshot and replays the logs on a resume.
	Store *store.Store
	// Heartbeat is how often an idle stream sends a comment line. 0
	// means DefaultHeartbeat.
	Heartbeat time.Duration
	// WithParents, when set, puts the parent scopes' verdicts into the
	// snapshot's deny_until_ms (server.Server.WithParents).
	WithParents func(context.Context, []*pb.BreakerState)
	// Reads, when set, takes one of the caller's slots of the per-token
	// read cap (--reads-per-token) for as long as the stream's snapshot
	// is read, or returns the ResourceExhausted refusal: a token's
	// snapshots count with its other reads.
	Reads func(*http.Request) (release func(), err error)
}

// DefaultHeartbeat is Watch.Heartbeat's default.
const DefaultHeartbeat = 15 * time.Second

// replayMargin is how far before the Last-Event-ID's time a resumed
// stream replays the other breakers' logs: each breaker's stream has its
// own ids, and an event of another breaker with an earlier id may have
// reached the client after the one it names (the hub hears each Cluster
// node on its own schedule). Replays are at least once; clients drop
// duplicates by id.
const replayMargin = 10 * time.Second

// snapshotPart and snapshotPartBytes bound one part of the snapshot (a
// page of the keyspace scan, or of the named breakers, cut further when
// it passes either): at most snapshotPart states, and no more of them
// than fit in snapshotPartBytes of protobuf (one state alone may pass
// it), so a stream holds one bounded part at a time whatever the number
// of breakers that deny and however much each state says.
const (
	snapshotPart      = 256
	snapshotPartBytes = 128 << 10
)

// writeTimeout bounds one write to a stream's client: a client that
// stops reading ends its stream rather than holding it.
const writeTimeout = 30 * time.Second

// sse marshals events and states as the RPCs' answers are (jsonCodec).
var sse = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// watchRequest is what a GET /v1/watch asks for.
type watchRequest struct {
	breakers   []string
	runNotices bool
	// resume is the Last-Event-ID's breaker and stream id, if given.
	resumeBreaker, resumeID string
}

// parseWatch reads the query (breaker=, repeated; run_notices=true) and
// Last-Event-ID (the header, or last_event_id= for clients that cannot
// set it), refusing anything else, naming it.
func parseWatch(r *http.Request) (watchRequest, *violation) {
	var w watchRequest
	q := r.URL.Query()
	for k, vs := range q {
		switch k {
		case "breaker":
			w.breakers = vs
		case "run_notices":
			w.runNotices = vs[0] == "true" || vs[0] == "1"
			if !w.runNotices && vs[0] != "false" && vs[0] != "0" {
				return w, &violation{Field: "run_notices", Description: fmt.Sprintf("must be true or false, got %q", vs[0])}
			}
		case "last_event_id":
		default:
			return w, &violation{Field: k, Description: "unknown query parameter: GET /v1/watch takes breaker, run_notices and last_event_id"}
		}
	}
	if err := limits.Names("breaker", w.breakers); err != nil {
		var fe *limits.FieldError
		if errors.As(err, &fe) {
			return w, &violation{Field: fe.Field, Description: fe.Problem}
		}
	}
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = q.Get("last_event_id")
	}
	if last != "" {
		i := strings.LastIndexByte(last, '/')
		if i <= 0 || !store.IsStreamID(last[i+1:]) {
			return w, &violation{Field: "Last-Event-ID", Description: fmt.Sprintf("must be an event's id, <breaker>/<stream id>, got %q", limits.OneLine(last, 64))}
		}
		w.resumeBreaker, w.resumeID = last[:i], last[i+1:]
	}
	return w, nil
}

// watch serves GET /v1/watch. It checks the token and the query before
// subscribing; the stream then opens with a snapshot, replays the logs
// after Last-Event-ID (a stream naming its breakers), and relays the
// live events with heartbeats until the client goes, the hub stops, the
// feed is lost (event: resync, and the stream ends: reconnect), or a
// reload revokes its token (event: resync saying so, and the stream
// ends).
func (f *front) watch(wt *Watch) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeError(w, http.StatusMethodNotAllowed, connect.CodeUnimplemented, "method: /v1/watch is GET, got "+r.Method)
			return
		}
		id, ok := f.identify(w, r)
		if !ok {
			return
		}
		req, bad := parseWatch(r)
		if bad != nil {
			writeError(w, http.StatusBadRequest, connect.CodeInvalidArgument, bad.Field+": "+bad.Description, *bad)
			return
		}
		if f.o.Auth != nil {
			if err := auth.AuthorizeWatch(id, &pb.WatchRequest{Breakers: req.breakers}); err != nil {
				writeStatus(w, err)
				return
			}
		}
		sub, err := wt.Hub.SubscribeAs(id.Name, req.breakers)
		if err != nil {
			writeError(w, http.StatusTooManyRequests, connect.CodeResourceExhausted, err.Error()+"; close a watch stream or watch from another daemon")
			return
		}
		defer sub.Close()
		release := func() {}
		if wt.Reads != nil {
			if release, err = wt.Reads(r); err != nil {
				writeStatus(w, err)
				return
			}
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		revoked := func() bool { return false }
		if f.o.Auth != nil {
			revoked = f.o.Auth.EndOnRevoke(ctx, r.Header, id, cancel)
		}
		s := &stream{w: w, rc: http.NewResponseController(w), req: req, sent: map[string]string{}}
		err = s.run(ctx, wt, sub, release)
		if revoked() && r.Context().Err() == nil {
			err = s.resync(fmt.Sprintf("authorization: token %q was revoked or its entry changed (tokens reloaded); this stream has ended", id.Name))
		}
		if err != nil && f.o.Log != nil && r.Context().Err() == nil {
			f.o.Log.Debug("watch stream ended", "err", err)
		}
	})
}

// stream is one GET /v1/watch response.
type stream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	req watchRequest
	// sent is the last stream id sent per breaker: a live event the
	// replay sent already is not sent twice.
	sent map[string]string
}

// run writes the stream: headers, snapshot, replay, then live events.
// It calls release once the snapshot is read.
func (s *stream) run(ctx context.Context, wt *Watch, sub *events.Subscription, release func()) error {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // proxies: do not buffer the stream
	s.w.WriteHeader(http.StatusOK)
	every := wt.heartbeat()
	err := s.snapshot(ctx, wt, every)
	release()
	if err != nil {
		return err
	}
	if err := s.replay(ctx, wt.Store); err != nil {
		return err
	}
	return s.live(ctx, sub, every)
}

// heartbeat is the stream's heartbeat interval: Heartbeat, or
// DefaultHeartbeat when it is not positive.
func (wt *Watch) heartbeat() time.Duration {
	if wt.Heartbeat <= 0 {
		return DefaultHeartbeat
	}
	return wt.Heartbeat
}

// denies reports whether a snapshot lists st: a breaker that denies now
// or may (every one not closed, any with deny_until_ms set), and one that
// denies some worker: its suspect (suspect_denial), or any worker by its
// parent scope (denial).
func denies(st *pb.BreakerState) bool {
	switch st.GetState() {
	case pb.State_STATE_CLOSED, pb.State_STATE_FORCED_CLOSED, pb.State_STATE_UNSPECIFIED:
		return st.GetDenyUntilMs() > 0 || st.GetDenial() != nil || st.GetSuspectDenial() != nil
	}
	return true
}

// snapshot sends the breakers that deny now or may (denies), only the
// named ones when the stream names breakers, in event: snapshot parts of
// at most snapshotPart states, each read as it is sent, the last with
// more false. It is read after subscribing, so no event falls between
// the two.
func (s *stream) snapshot(ctx context.Context, wt *Watch, every time.Duration) error {
	part := func(states []*pb.BreakerState, more bool) error {
		if wt.WithParents != nil {
			wt.WithParents(ctx, states)
		}
		states = slices.DeleteFunc(states, func(x *pb.BreakerState) bool { return !denies(x) })
		// A SCAN step may find more keys than it was asked for (COUNT is a
		// hint): the part is cut to its bounds all the same. The last part
		// is sent even when empty: it says the snapshot is whole.
		for len(states) > 0 || !more {
			n := partLen(states)
			rest := states[n:]
			if err := s.send("", "snapshot", &pb.WatchSnapshot{States: states[:n], HeartbeatMs: every.Milliseconds(), More: more || len(rest) > 0}); err != nil {
				return err
			}
			if states = rest; len(rest) == 0 && !more {
				return nil
			}
		}
		return nil
	}
	if names := s.req.breakers; len(names) > 0 {
		for len(names) > 0 {
			n := min(len(names), snapshotPart)
			states, err := wt.Store.BatchGet(ctx, names[:n])
			if err != nil {
				return s.resync("the snapshot could not be read: " + err.Error())
			}
			names = names[n:]
			if err := part(states, len(names) > 0); err != nil {
				return err
			}
		}
		return nil
	}
	for token := ""; ; {
		// Every state: a closed breaker may deny its suspect worker.
		states, next, err := wt.Store.ListPage(ctx, token, snapshotPart)
		if err != nil {
			return s.resync("the snapshot could not be read: " + err.Error())
		}
		if err := part(states, next != ""); err != nil || next == "" {
			return err
		}
		token = next
	}
}

// partLen is how many of states go in the next snapshot part: at most
// snapshotPart, within snapshotPartBytes, and at least one.
func partLen(states []*pb.BreakerState) int {
	size := 0
	for i, st := range states {
		if size += proto.Size(st); i == snapshotPart || (i > 0 && size > snapshotPartBytes) {
			return i
		}
	}
	return len(states)
}

// replay sends, on a resume of a stream that names its breakers, each
// one's logged events after the Last-Event-ID (the named breaker's after
// its id, the others' after its time less replayMargin), and event:
// resync naming the breakers whose log no longer holds that far back.
// An unfiltered stream has had its fresh snapshot: nothing to replay.
func (s *stream) replay(ctx context.Context, st *store.Store) error {
	if s.req.resumeID == "" || len(s.req.breakers) == 0 {
		return nil
	}
	after := make(map[string]string, len(s.req.breakers))
	others := fmt.Sprintf("%d-0", max(streamMs(s.req.resumeID)-replayMargin.Milliseconds(), 0))
	for _, b := range s.req.breakers {
		after[b] = others
		if b == s.req.resumeBreaker {
			after[b] = s.req.resumeID
		}
	}
	logs, err := st.EventsAfter(ctx, after)
	if err != nil {
		return s.resync("the event logs could not be read: " + err.Error())
	}
	var lost []string
	var replayed []*pb.Event
	for _, b := range s.req.breakers {
		if logs[b].Lost {
			lost = append(lost, b)
		}
		replayed = append(replayed, logs[b].Events...)
	}
	if len(lost) > 0 {
		if err := s.resync("the event log no longer holds every event after Last-Event-ID: read these breakers' state afresh", lost...); err != nil {
			return err
		}
	}
	for _, e := range replayed {
		if err := s.event(e); err != nil {
			return err
		}
	}
	return nil
}

// live relays the subscription's events, with a comment line after each
// idle heartbeat, until ctx ends or the subscription does.
func (s *stream) live(ctx context.Context, sub *events.Subscription, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := s.write(": heartbeat\n\n"); err != nil {
				return err
			}
		case e, ok := <-sub.C:
			if !ok {
				if err := sub.Err(); err != nil {
					return s.resync(err.Error() + "; reconnect with Last-Event-ID")
				}
				return nil // the hub stopped: the daemon is shutting down
			}
			if !s.req.runNotices && store.IsNotice(e) {
				continue
			}
			if err := s.event(e); err != nil {
				return err
			}
		}
	}
}

// event sends one breaker event, id <breaker>/<stream id> (a run notice
// has no id: it is not logged), unless it was sent already.
func (s *stream) event(e *pb.Event) error {
	id := ""
	if e.GetId() != "" {
		if last, ok := s.sent[e.GetBreaker()]; ok && store.CompareIDs(e.GetId(), last) <= 0 {
			return nil
		}
		s.sent[e.GetBreaker()] = e.GetId()
		id = e.GetBreaker() + "/" + e.GetId()
	}
	return s.send(id, "event", e)
}

// resync sends event: resync with why, and the breakers it concerns
// (all the stream's when none are named): the client should read their
// state afresh (reconnect, or Get them).
func (s *stream) resync(why string, breakers ...string) error {
	data, err := json.Marshal(struct {
		Reason   string   `json:"reason"`
		Breakers []string `json:"breakers,omitempty"`
	}{limits.OneLine(why, 512), breakers})
	if err != nil {
		return fmt.Errorf("httpapi: marshal resync: %w", err)
	}
	return s.write("event: resync\ndata: " + string(data) + "\n\n")
}

// send writes one SSE event: an optional id, its type and m as JSON.
func (s *stream) send(id, typ string, m proto.Message) error {
	data, err := sse.Marshal(m)
	if err != nil {
		return fmt.Errorf("httpapi: marshal %s: %w", typ, err)
	}
	var b strings.Builder
	if id != "" {
		b.WriteString("id: " + id + "\n")
	}
	b.WriteString("event: " + typ + "\ndata: ")
	b.Write(data)
	b.WriteString("\n\n")
	return s.write(b.String())
}

// write sends b and flushes it, within writeTimeout.
func (s *stream) write(b string) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := s.w.Write([]byte(b)); err != nil {
		return err
	}
	return s.rc.Flush()
}

// streamMs is the time part of a stream id, in ms since the epoch.
func streamMs(id string) int64 {
	ms, _, _ := strings.Cut(id, "-")
	var n int64
	_, _ = fmt.Sscan(ms, &n)
	return n
}
