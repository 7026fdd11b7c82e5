// Package events fans the fleet's live transition events out to Watch
// subscribers. The scripts PUBLISH each event as they append it to the
// breaker's durable stream; every daemon holds one subscription and relays
// what it hears, so a watcher on any daemon sees every daemon's events.
package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/store"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// ErrTooSlow ends a subscription whose reader fell behind by more than its
// buffer: the reader must resubscribe and resync its view from List.
var ErrTooSlow = errors.New("events: subscriber fell behind")

// ErrFeedLost ends every subscription when the hub's own Redis connection
// was lost and go-redis subscribed again: what was published meanwhile
// never reached the hub, so each reader must resubscribe and resync its
// view from List (the events are in the durable log).
var ErrFeedLost = errors.New("events: the feed lost its Redis connection")

// ErrTooManyStreams refuses a subscription past a Limits cap.
var ErrTooManyStreams = errors.New("events: too many Watch streams")

// bufferSize is how many events a subscriber may lag before ErrTooSlow.
const bufferSize = 256

// Limits cap the hub's subscriptions. Zero means no cap.
type Limits struct {
	// Streams caps the subscriptions open at once on this daemon.
	Streams int
	// PerOwner caps the subscriptions one owner (a token's name) holds
	// at once on this daemon.
	PerOwner int
}

// Hub relays events from one Redis pub/sub channel to in-process
// subscribers. It is safe for concurrent use.
type Hub struct {
	rdb     redis.UniversalClient
	channel string
	log     *slog.Logger

	mu     sync.Mutex
	limits Limits
	// subs holds every subscription; all those without a filter; byName
	// those whose filter names a breaker, so that an event costs only
	// the subscribers that want it, however many others there are.
	subs      map[*Subscription]struct{}
	all       map[*Subscription]struct{}
	byName    map[string]map[*Subscription]struct{}
	perOwner  map[string]int
	observers []func(*pb.Event)
	// state reads a breaker's state for Event.state (SetStateReader).
	state func(context.Context, string) (*pb.BreakerState, error)

	// live is closed once Run's first subscription is confirmed (Live).
	live     chan struct{}
	liveOnce sync.Once

	// uncapped counts the subscriptions made outside every cap
	// (Subscribe: in-process readers such as internal/scope's view of
	// parents): they count toward no Limits.
	uncapped int
}

// SetLimits sets the caps SubscribeAs enforces from now on.
func (h *Hub) SetLimits(l Limits) {
	h.mu.Lock()
	h.limits = l
	h.mu.Unlock()
}

// Observe adds fn to be called, on Run's goroutine, with every event the
// hub hears (run notices, store.IsNotice, excepted), before subscribers
// get it (metrics and logs). fn must not
// block. Call Observe before Run.
func (h *Hub) Observe(fn func(*pb.Event)) {
	h.mu.Lock()
	h.observers = append(h.observers, fn)
	h.mu.Unlock()
}

// stateTimeout bounds the read of an event's state: past it, the event
// goes out without one rather than late.
const stateTimeout = time.Second

// SetStateReader makes the hub attach to each event (Event.state) the
// breaker's state read just after it, while a client's stream
// (SubscribeAs: Watch, the HTTP stream) is open: one read per event,
// however many streams.
func (h *Hub) SetStateReader(read func(ctx context.Context, breaker string) (*pb.BreakerState, error)) {
	h.mu.Lock()
	h.state = read
	h.mu.Unlock()
}

// withState sets e.State when a client's stream is open (see
// SetStateReader); a read that fails leaves it unset.
func (h *Hub) withState(ctx context.Context, e *pb.Event) {
	h.mu.Lock()
	read, streams := h.state, len(h.subs)-h.uncapped
	h.mu.Unlock()
	if read == nil || streams == 0 || e.GetBreaker() == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	st, err := read(ctx, e.GetBreaker())
	if err != nil {
		h.log.Warn("events: the event's state could not be read; it goes out without one", "breaker", e.GetBreaker(), "err", err)
		return
	}
	e.State = st
}

// NewHub returns a Hub for channel. Call Run to start relaying.
func NewHub(rdb redis.UniversalClient, channel string, log *slog.Logger) *Hub {
	return &Hub{rdb: rdb, channel: channel, log: log, live: make(chan struct{}), subs: map[*Subscription]struct{}{},
		all: map[*Subscription]struct{}{}, byName: map[string]map[*Subscription]struct{}{}, perOwner: map[string]int{}}
}

// Subscription is one subscriber's feed.
type Subscription struct {
	// C delivers events in the order the hub heard them: one breaker's
	// events in the order they happened; events of different breakers may
	// interleave differently than they happened (on Redis Cluster each
	// node's PUBLISH reaches the hub over the cluster bus on its own
	// schedule), so sort by at_ms when it matters. It is closed when
	// the subscription ends; Err then says why.
	C chan *pb.Event
	// filter is the set of breakers asked for; empty means all.
	filter map[string]struct{}
	owner  string
	hub    *Hub
	err    error
	capped bool // made by SubscribeAs: counted toward the Limits
}

// Err returns why C was closed (ErrTooSlow, ErrFeedLost, or nil after
// Close or the hub's end).
func (s *Subscription) Err() error {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.err
}

// Close ends the subscription.
func (s *Subscription) Close() { s.hub.drop(s, nil) }

// Subscribe returns a feed of events for the named breakers (all when
// breakers is empty), outside every cap (for in-process readers). Close
// it when done.
func (h *Hub) Subscribe(breakers []string) *Subscription {
	s, _ := h.subscribe("", breakers, false)
	return s
}

// SubscribeAs is Subscribe for owner (a token's name; "" without tokens),
// within the hub's Limits: past a cap it returns an error wrapping
// ErrTooManyStreams that says which cap.
func (h *Hub) SubscribeAs(owner string, breakers []string) (*Subscription, error) {
	return h.subscribe(owner, breakers, true)
}

func (h *Hub) subscribe(owner string, breakers []string, capped bool) (*Subscription, error) {
	s := &Subscription{C: make(chan *pb.Event, bufferSize), hub: h, owner: owner, capped: capped}
	if len(breakers) > 0 {
		s.filter = make(map[string]struct{}, len(breakers))
		for _, b := range breakers {
			s.filter[b] = struct{}{}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if capped {
		switch l := h.limits; {
		case l.Streams > 0 && len(h.subs)-h.uncapped >= l.Streams:
			return nil, fmt.Errorf("%w: this daemon serves at most %d", ErrTooManyStreams, l.Streams)
		case l.PerOwner > 0 && h.perOwner[owner] >= l.PerOwner:
			return nil, fmt.Errorf("%w: %q holds %d, the most one token may hold on this daemon", ErrTooManyStreams, owner, h.perOwner[owner])
		}
	}
	h.subs[s] = struct{}{}
	if capped {
		h.perOwner[owner]++
	} else {
		h.uncapped++
	}
	if s.filter == nil {
		h.all[s] = struct{}{}
	}
	for b := range s.filter {
		set := h.byName[b]
		if set == nil {
			set = map[*Subscription]struct{}{}
			h.byName[b] = set
		}
		set[s] = struct{}{}
	}
	return s, nil
}

// Live returns a channel closed once the hub's first subscription to its
// channel is confirmed: from then on every event published reaches the
// hub, until a lost feed ends every subscription with ErrFeedLost. A
// reader that keeps a view from the events must not trust it before.
func (h *Hub) Live() <-chan struct{} { return h.live }

// Streams returns the number of subscriptions open.
func (h *Hub) Streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// dropAll ends every subscription with err.
func (h *Hub) dropAll(err error) {
	h.mu.Lock()
	subs := make([]*Subscription, 0, len(h.subs))
	for s := range h.subs {
		subs = append(subs, s)
	}
	h.mu.Unlock()
	for _, s := range subs {
		h.drop(s, err)
	}
}

func (h *Hub) drop(s *Subscription, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; !ok {
		return
	}
	delete(h.subs, s)
	delete(h.all, s)
	for b := range s.filter {
		delete(h.byName[b], s)
		if len(h.byName[b]) == 0 {
			delete(h.byName, b)
		}
	}
	if !s.capped {
		h.uncapped--
	} else if h.perOwner[s.owner]--; h.perOwner[s.owner] == 0 {
		delete(h.perOwner, s.owner)
	}
	s.err = err
	close(s.C)
}

// publish hands e to the subscribers that want it: those of its breaker
// and those of every breaker. The others cost nothing.
func (h *Hub) publish(e *pb.Event) {
	h.mu.Lock()
	var slow []*Subscription
	send := func(set map[*Subscription]struct{}) {
		for s := range set {
			select {
			case s.C <- e:
			default:
				slow = append(slow, s)
			}
		}
	}
	send(h.byName[e.Breaker])
	send(h.all)
	h.mu.Unlock()
	for _, s := range slow {
		h.drop(s, ErrTooSlow)
	}
}

// Start runs the hub in the background and returns once its first
// subscription is confirmed; stop ends it and waits for it. ctx bounds only
// the wait: a Redis that does not answer in time is an error, and the hub
// is stopped again.
func (h *Hub) Start(ctx context.Context) (stop func(), err error) {
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- h.Run(run, ready) }()
	stop = func() { cancel(); <-done }
	select {
	case <-ready:
		return stop, nil
	case <-ctx.Done():
		stop()
		return nil, fmt.Errorf("events: subscribe %s: %w", h.channel, ctx.Err())
	}
}

// Run subscribes to the channel and relays events until ctx ends. While
// Redis cannot be reached it retries, backing off up to 5s, and logs each
// failure; ready, when non-nil, is closed once the first subscription is
// confirmed, so a caller can wait for it. After that go-redis re-subscribes
// by itself after a connection loss; events published while it was away
// are in the durable log, not in the feed, so once the new subscription is
// confirmed every subscriber is ended with ErrFeedLost (a Watch stream then
// ends and its client resyncs): none is left believing it missed nothing.
func (h *Hub) Run(ctx context.Context, ready chan<- struct{}) error {
	ps := h.rdb.Subscribe(ctx, h.channel)
	defer ps.Close()
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		_, err := ps.Receive(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		h.log.Warn("events: subscribe failed; retrying", "channel", h.channel, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
	h.liveOnce.Do(func() { close(h.live) })
	if ready != nil {
		close(ready)
	}
	ch := ps.ChannelWithSubscriptions()
	for {
		select {
		case <-ctx.Done():
			h.dropAll(nil)
			return nil
		case msg, ok := <-ch:
			if !ok {
				return errors.New("events: subscription closed")
			}
			m, isMessage := msg.(*redis.Message)
			if !isMessage {
				// A subscription confirmed again: go-redis reconnected.
				if sub, ok := msg.(*redis.Subscription); ok && sub.Kind == "subscribe" {
					h.log.Warn("events: the feed's Redis connection was lost and is back; ending every Watch stream so its client resyncs",
						"channel", h.channel, "streams", h.Streams())
					h.dropAll(ErrFeedLost)
				}
				continue
			}
			e, err := store.DecodeEvent([]byte(m.Payload))
			if err != nil {
				h.log.Warn("events: dropping undecodable event", "err", err)
				continue
			}
			if !store.IsNotice(e) { // a run notice is no transition: only watchers get it
				h.mu.Lock()
				obs := h.observers
				h.mu.Unlock()
				for _, fn := range obs {
					fn(e)
				}
				h.withState(ctx, e)
			}
			h.publish(e)
		}
	}
}

// View is an event in the JSON that breakerctl --json prints and the
// webhooks post: enum values lower case without their prefix ("opened",
// "half_open"), numbers as numbers, at_ms ms since the epoch on the Redis
// clock.
type View struct {
	ID              string `json:"id"`
	Breaker         string `json:"breaker"`
	Kind            string `json:"kind"`
	From            string `json:"from"`
	To              string `json:"to"`
	Generation      int64  `json:"generation"`
	Reason          string `json:"reason"`
	Failures        int64  `json:"failures"`
	DistinctWorkers int64  `json:"distinct_workers"`
	CooldownMs      int64  `json:"cooldown_ms"`
	AtMs            int64  `json:"at_ms"`
	Actor           string `json:"actor"`
	// Cause is why it happened (Event.cause: docs/operations.md, "Causes").
	Cause string `json:"cause"`
	// Shadow: the breaker is in shadow mode and the event says what would
	// have happened, not what is enforced (an "opened" event is "would
	// have opened"; its reason starts "shadow mode, not enforced: ").
	Shadow bool `json:"shadow"`
	// TraceID is, on an open a Record caused, that call's W3C trace id
	// (Event.trace_id: docs/observability.md); omitted when none.
	TraceID string `json:"trace_id,omitempty"`
}

// ViewOf returns e's View.
func ViewOf(e *pb.Event) View {
	return View{
		ID: e.GetId(), Breaker: e.GetBreaker(), Kind: breaker.EnumName(e.GetKind()), From: breaker.EnumName(e.GetFrom()),
		To: breaker.EnumName(e.GetTo()), Generation: e.GetGeneration(), Reason: e.GetReason(), Failures: e.GetFailures(),
		DistinctWorkers: e.GetDistinctWorkers(), CooldownMs: e.GetCooldownMs(), AtMs: e.GetAtMs(), Actor: e.GetActor(),
		Cause: e.GetCause(), Shadow: e.GetShadow(), TraceID: e.GetTraceId(),
	}
}
