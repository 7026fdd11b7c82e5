package hooks

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/webhook"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Headers of each delivery. Deliveries follow the Standard Webhooks spec
// (https://www.standardwebhooks.com): webhook-id, webhook-timestamp and
// webhook-signature (webhook.IDHeader and the rest; receivers check
// them with client.VerifyWebhook). The body-only X-Breakerd-Signature of
// earlier releases is no longer sent: it signed no timestamp, so a
// captured request replayed forever.
const (
	// HeaderEvent carries the event name ("opened").
	HeaderEvent = "X-Breakerd-Event"
	// HeaderDelivery carries "<breaker>/<stream entry id>": the same for
	// every attempt of one event, so a receiver can drop the rare
	// duplicate (a daemon that stalled past MinIdle). webhook-id is the
	// standard form of the same id.
	HeaderDelivery = "X-Breakerd-Delivery"
)

// DeliveryID returns an event's webhook-id: "evt_" and 32 hex digits of
// the SHA-256 of "<breaker>/<stream entry id>" (its X-Breakerd-Delivery),
// the same on every attempt and every daemon, and free of the "." the
// signed content uses as its separator.
func DeliveryID(breaker, streamID string) string {
	sum := sha256.Sum256([]byte(breaker + "/" + streamID))
	return "evt_" + hex.EncodeToString(sum[:16])
}

// Payload is the JSON body of a delivery. States are lower case
// ("closed", "open", "half_open", "forced_open", "forced_closed",
// "paused"); at_ms is ms since the epoch on the Redis clock.
type Payload struct {
	Event string `json:"event"`
	events.View
	// Summary is set on the one alert a minute sent for a token past its
	// alert quota (--alerts-per-minute): the token, and how many of its
	// alerts were not sent since the previous summary, this one included
	// (they are in the breaker's event log).
	Summary *Summary `json:"summary,omitempty"`
	// Saved is set on an event that ends a spell of refused calls (to
	// closed from open, half_open, forced_open or paused): what the
	// breaker saved meanwhile, an estimate.
	Saved *Saved `json:"saved,omitempty"`
}

// Summary is a Payload's account of the alerts a token raised past its
// alert quota.
type Summary struct {
	Token  string `json:"token"`
	Alerts int64  `json:"alerts"`
}

// Options configure a Dispatcher. Zero values mean their defaults.
type Options struct {
	// Hooks to deliver to.
	Hooks []Hook
	// Feed is the daemon's event hub (its one Redis subscription): it
	// tells the dispatcher at once which breaker's stream has something
	// new. Required when there are hooks.
	Feed *events.Hub
	// Consumer names this daemon in every consumer group. Default: host
	// name, pid and a random suffix (unique per process).
	Consumer string
	// MinIdle is how long an entry must sit unacknowledged on another
	// consumer before this one reclaims it (XAUTOCLAIM): longer than a
	// stalled daemon might pause, as a live one refreshes its entries every
	// MinIdle/3. Default 1m.
	MinIdle time.Duration
	// Sweep is how often every event stream is found by SCAN (streams the
	// live feed missed) and entries pending past MinIdle are reclaimed.
	// Default 30s.
	Sweep time.Duration
	// Log receives delivery failures and abandonments. Default: discard.
	Log *slog.Logger
	// Registerer, when set, registers the delivery counters.
	Registerer prometheus.Registerer
	// Client posts the webhooks. Default: an http.Client with no overall
	// timeout (each attempt is bounded by its hook's Timeout). Its
	// CheckRedirect is replaced: a redirect is never followed (a 307 would
	// re-post the signed body to another host), and counts as a failed
	// attempt.
	Client *http.Client
	// Now is the clock of webhook-timestamp. Default time.Now.
	Now func() time.Time
}

// Dispatcher delivers events to hooks. Run it on every daemon: the
// consumer groups share the work and deliver each event once per hook.
type Dispatcher struct {
	rdb   redis.UniversalClient
	st    *store.Store
	o     Options
	hooks []*hookState
	m     *metrics
}

type hookState struct {
	Hook
	key    []byte // the HMAC key of webhook-signature (webhook.Key)
	group  string
	start  string          // the group's start id, set by Run
	groups map[string]bool // streams known to have the group; only the hook's worker touches it

	mu      sync.Mutex
	pending map[string]bool // breakers to look at
	claim   bool            // a sweep asked for XAUTOCLAIM too
	wake    chan struct{}
}

// New returns a Dispatcher over rdb and st (for SCAN), and registers its
// counters on o.Registerer. Errors: an invalid hook, or a counter already
// registered.
func New(rdb redis.UniversalClient, st *store.Store, o Options) (*Dispatcher, error) {
	if o.Feed == nil && len(o.Hooks) > 0 {
		return nil, errors.New("hooks: Options.Feed is nil: the dispatcher hears new events from the daemon's hub")
	}
	if o.Consumer == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		o.Consumer = fmt.Sprintf("%s-%d-%x", host, os.Getpid(), b)
	}
	if o.MinIdle == 0 {
		o.MinIdle = time.Minute
	}
	if o.Sweep == 0 {
		o.Sweep = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	c := *o.Client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	o.Client = &c
	if o.Now == nil {
		o.Now = time.Now
	}
	d := &Dispatcher{rdb: rdb, st: st, o: o, m: newMetrics()}
	for i, h := range o.Hooks {
		if err := h.Validate(); err != nil {
			return nil, fmt.Errorf("hooks: hooks[%d].%w", i, err)
		}
		key, _ := webhook.Key(h.Secret) // Validate checked it
		d.hooks = append(d.hooks, &hookState{Hook: h.withDefaults(), key: key, group: "hook:" + h.Name,
			groups: map[string]bool{}, pending: map[string]bool{}, wake: make(chan struct{}, 1)})
	}
	if o.Registerer != nil {
		if err := d.m.register(o.Registerer); err != nil {
			return nil, fmt.Errorf("hooks: register metrics: %w", err)
		}
	}
	return d, nil
}

// sinceKey holds when a hook was first configured anywhere in the fleet,
// in ms on the Redis clock: its consumer groups start there, so a new hook
// is not flooded with the history of the event log. Every sweep extends
// its life by sinceTTL, so it lapses only for a hook no daemon has run
// for that long.
func sinceKey(hook string) string { return store.HookSinceKey(hook) }

const sinceTTL = 30 * 24 * time.Hour

// Run delivers until ctx ends. ready, when non-nil, is closed once the
// live feed is subscribed and every hook's start is known. Entries being
// delivered when ctx ends stay pending; another daemon reclaims them after
// MinIdle.
func (d *Dispatcher) Run(ctx context.Context, ready chan<- struct{}) error {
	if len(d.hooks) == 0 {
		if ready != nil {
			close(ready)
		}
		<-ctx.Done()
		return nil
	}
	for _, h := range d.hooks {
		now, err := d.rdb.Time(ctx).Result()
		if err != nil {
			return fmt.Errorf("hooks: time: %w", err)
		}
		if err := d.rdb.SetNX(ctx, sinceKey(h.Name), now.UnixMilli(), sinceTTL).Err(); err != nil {
			return fmt.Errorf("hooks: %s: %w", h.Name, err)
		}
		since, err := d.rdb.Get(ctx, sinceKey(h.Name)).Int64()
		if err != nil {
			return fmt.Errorf("hooks: %s: %w", h.Name, err)
		}
		h.start = fmt.Sprintf("%d-0", max(since-1, 0))
	}
	select {
	case <-d.o.Feed.Live():
	case <-ctx.Done():
		return nil
	}
	sub := d.o.Feed.Subscribe(nil)
	defer func() { sub.Close() }()
	if ready != nil {
		close(ready)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, h := range d.hooks {
		wg.Add(1)
		go func() { defer wg.Done(); d.work(ctx, h) }()
	}

	d.sweep(ctx)
	tick := time.NewTicker(d.o.Sweep)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			d.sweep(ctx)
		case e, ok := <-sub.C:
			if ok {
				if e.GetBreaker() != "" && !store.IsNotice(e) {
					d.mark([]string{e.GetBreaker()}, false)
				}
				continue
			}
			if sub.Err() == nil {
				return nil // the hub ended with the daemon
			}
			// The hub lost its feed (or this reader fell behind): events
			// may have gone unheard. Listen again, then sweep for them.
			d.o.Log.Warn("hooks: the event feed was lost; sweeping for what it missed", "err", sub.Err())
			sub = d.o.Feed.Subscribe(nil)
			d.sweep(ctx)
		}
	}
}

// sweep marks every breaker with an event stream, with reclaiming.
func (d *Dispatcher) sweep(ctx context.Context) {
	for _, h := range d.hooks {
		_ = d.rdb.Expire(ctx, sinceKey(h.Name), sinceTTL).Err() // best effort; the next sweep retries
	}
	names, err := d.st.EventStreams(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.o.Log.Warn("hooks: sweep failed; retrying at the next sweep", "err", err)
		}
		return
	}
	d.mark(names, true)
}

func (d *Dispatcher) mark(breakers []string, claim bool) {
	for _, h := range d.hooks {
		h.mu.Lock()
		for _, b := range breakers {
			if h.covers(b) {
				h.pending[b] = true
			}
		}
		h.claim = h.claim || claim
		h.mu.Unlock()
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
}

// work is one hook's delivery loop: one event at a time, so that a hook
// that is down holds up only itself.
func (d *Dispatcher) work(ctx context.Context, h *hookState) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.wake:
		}
		h.mu.Lock()
		todo, claim := h.pending, h.claim
		h.pending, h.claim = map[string]bool{}, false
		h.mu.Unlock()
		for b := range todo {
			if ctx.Err() != nil {
				return
			}
			if err := d.process(ctx, h, b, claim); err != nil && ctx.Err() == nil {
				d.o.Log.Warn("hooks: reading events failed; retrying at the next sweep", "hook", h.Name, "breaker", b, "err", err)
			}
		}
	}
}

// errNoStream: the stream expired (or never existed); nothing to do.
var errNoStream = errors.New("hooks: no such stream")

func (d *Dispatcher) ensureGroup(ctx context.Context, h *hookState, key string) error {
	if h.groups[key] {
		return nil
	}
	// No MKSTREAM: an empty stream made here would be a key for a breaker
	// with nothing to say, and would never expire.
	err := d.rdb.XGroupCreate(ctx, key, h.group, h.start).Err()
	switch {
	case err == nil, redis.HasErrorPrefix(err, "BUSYGROUP"):
		h.groups[key] = true
		return nil
	case isMissingKey(err):
		return errNoStream
	}
	return err
}

func isNoGroup(err error) bool { return redis.HasErrorPrefix(err, "NOGROUP") }

// isMissingKey reports Redis's refusal of XGROUP CREATE on a key that does
// not exist: a plain ERR reply, told apart only by its words.
func isMissingKey(err error) bool {
	var re redis.Error
	return errors.As(err, &re) &&
		(strings.Contains(re.Error(), "requires the key to exist") || strings.Contains(re.Error(), "no such key"))
}

// process delivers what is waiting for h on breaker's stream: entries
// pending past MinIdle on any consumer (with claim), then new ones.
func (d *Dispatcher) process(ctx context.Context, h *hookState, breaker string, claim bool) error {
	key := store.EventsKey(breaker)
	for retry := 0; ; retry++ {
		err := d.ensureGroup(ctx, h, key)
		if errors.Is(err, errNoStream) {
			return nil
		}
		if err == nil {
			err = d.drain(ctx, h, key, claim)
		}
		if isNoGroup(err) && retry == 0 {
			// The stream expired and came back without the group.
			delete(h.groups, key)
			continue
		}
		return err
	}
}

// drain delivers h's entries of the stream at key one at a time: each
// entry is claimed (XAUTOCLAIM, XREADGROUP) only when its delivery starts,
// COUNT 1, as the heartbeat keeps only the entry in delivery fresh. An
// entry claimed in a batch would sit idle behind a slow hook's deliveries
// of the others and be reclaimed by another daemon after MinIdle: one
// event delivered twice, with no daemon stalled.
func (d *Dispatcher) drain(ctx context.Context, h *hookState, key string, claim bool) error {
	if claim {
		start := "0-0"
		for {
			msgs, deleted, next, err := d.autoClaim(ctx, h, key, start)
			if err != nil {
				return err
			}
			for _, id := range deleted {
				// A daemon stopped mid-delivery and the stream was trimmed
				// past the entry before anyone reclaimed it: nobody holds
				// it any more.
				d.o.Log.Error("hooks: delivery abandoned: the event was trimmed from its stream while pending on a stopped daemon (raise --events-max-len)",
					"hook", h.Name, "stream", key, "id", id)
				d.m.abandoned.WithLabelValues(h.Name, "trimmed").Inc()
			}
			for _, m := range msgs {
				if !d.deliver(ctx, h, key, m) {
					return nil
				}
			}
			if next == "0-0" || next == "" {
				break
			}
			start = next
		}
	}
	for {
		res, err := d.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: h.group, Consumer: d.o.Consumer,
			Streams: []string{key, ">"}, Count: 1, Block: -1}).Result()
		if errors.Is(err, redis.Nil) {
			return nil
		}
		if err != nil {
			return err
		}
		n := 0
		for _, s := range res {
			for _, m := range s.Messages {
				n++
				if !d.deliver(ctx, h, key, m) {
					return nil
				}
			}
		}
		if n == 0 {
			return nil
		}
	}
}

// autoClaim runs XAUTOCLAIM from start: the entries it claimed for this
// consumer, the ids it dropped from the pending list because the stream no
// longer holds them (Redis 7's third reply element, which go-redis's
// XAutoClaim discards), and where to continue ("0-0" when done).
func (d *Dispatcher) autoClaim(ctx context.Context, h *hookState, key, start string) (msgs []redis.XMessage, deleted []string, next string, err error) {
	res, err := d.rdb.Do(ctx, "XAUTOCLAIM", key, h.group, d.o.Consumer, d.o.MinIdle.Milliseconds(), start, "COUNT", 1).Slice()
	if err != nil {
		return nil, nil, "", err
	}
	bad := func(what string) error { return fmt.Errorf("hooks: XAUTOCLAIM on %s: unexpected reply: %s", key, what) }
	if len(res) < 2 {
		return nil, nil, "", bad(fmt.Sprintf("%d elements", len(res)))
	}
	next, ok := res[0].(string)
	entries, ok2 := res[1].([]any)
	if !ok || !ok2 {
		return nil, nil, "", bad(fmt.Sprintf("%T, %T", res[0], res[1]))
	}
	for _, e := range entries {
		pair, ok := e.([]any)
		if !ok || len(pair) != 2 {
			continue // Redis 6 answers nil for an entry the stream no longer holds
		}
		id, _ := pair[0].(string)
		fields, _ := pair[1].([]any)
		m := redis.XMessage{ID: id, Values: map[string]any{}}
		for i := 0; i+1 < len(fields); i += 2 {
			k, _ := fields[i].(string)
			m.Values[k] = fields[i+1]
		}
		msgs = append(msgs, m)
	}
	if len(res) >= 3 {
		gone, _ := res[2].([]any)
		for _, g := range gone {
			if id, ok := g.(string); ok {
				deleted = append(deleted, id)
			}
		}
	}
	return msgs, deleted, next, nil
}

// deliver posts one entry to h until it is accepted or given up on, then
// acknowledges it. It returns false when the daemon is stopping (the entry
// stays pending for another daemon).
func (d *Dispatcher) deliver(ctx context.Context, h *hookState, key string, m redis.XMessage) bool {
	ev, err := store.EventFromStream(m)
	if err != nil || len(m.Values) == 0 {
		d.o.Log.Error("hooks: dropping an undecodable event", "hook", h.Name, "stream", key, "id", m.ID, "err", err)
		d.m.abandoned.WithLabelValues(h.Name, "undecodable").Inc()
		d.ack(ctx, h, key, m.ID)
		return true
	}
	name := EventName(ev)
	mark, _ := m.Values["quiet"].(string)
	n, token, summary := store.ParseSummary(mark)
	if !h.Wants(name, ev.Breaker) || mark != "" && !summary {
		d.ack(ctx, h, key, m.ID) // an alert past its token's quota goes in a summary
		return true
	}
	p := payload(name, ev)
	if summary {
		p.Summary = &Summary{Token: token, Alerts: n}
	}
	p.Saved = d.saved(ctx, ev)
	body, err := json.Marshal(p)
	if err != nil {
		d.o.Log.Error("hooks: dropping an event that does not encode", "hook", h.Name, "id", m.ID, "err", err)
		d.m.abandoned.WithLabelValues(h.Name, name).Inc()
		d.ack(ctx, h, key, m.ID)
		return true
	}

	dctx, cancel := context.WithCancel(ctx)
	var hs heartbeatState
	hb := make(chan struct{})
	go func() { defer close(hb); d.heartbeat(dctx, cancel, &hs, h, key, m.ID) }()
	done := d.attempt(dctx, h, name, ev, body)
	cancel()
	<-hb
	switch {
	case done:
		d.ack(ctx, h, key, m.ID)
	case ctx.Err() != nil:
		if hs.trimmed.Load() {
			// Nobody else can deliver it: it is in no pending list.
			d.o.Log.Error("hooks: delivery abandoned: the daemon stopped while delivering an event already trimmed from its stream",
				"hook", h.Name, "breaker", ev.Breaker, "event", name, "id", m.ID)
			d.m.abandoned.WithLabelValues(h.Name, name).Inc()
		}
		return false
	case hs.owner.Load() != nil:
		d.o.Log.Warn("hooks: another daemon took over this delivery", "hook", h.Name, "breaker", ev.Breaker,
			"event", name, "id", m.ID, "by", *hs.owner.Load())
	}
	return true
}

// heartbeatState is what a delivery's heartbeat found out.
type heartbeatState struct {
	// owner is the consumer that holds the entry now, when another
	// consumer does (or did, and acknowledged it): the delivery stops.
	owner atomic.Pointer[string]
	// trimmed: the stream no longer holds the entry (XADD MAXLEN trimmed it
	// mid-delivery) and no pending list names it; the delivery goes on
	// from the copy this daemon holds.
	trimmed atomic.Bool
}

// attempt posts body until a 2xx or until h.GiveUpAfter has passed
// (logged and counted), and then returns true: the entry is done with. It
// returns false when ctx ends first.
func (d *Dispatcher) attempt(ctx context.Context, h *hookState, name string, ev *pb.Event, body []byte) bool {
	start := time.Now()
	wait := h.Backoff
	for n := 1; ; n++ {
		code, err := d.post(ctx, h, name, ev, body)
		if err == nil && code/100 == 2 {
			d.m.delivered.WithLabelValues(h.Name, name).Inc()
			if n > 1 {
				d.o.Log.Info("hooks: delivered after retries", "hook", h.Name, "breaker", ev.Breaker, "event", name, "id", ev.Id, "attempts", n)
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		d.m.failures.WithLabelValues(h.Name, name).Inc()
		why := fmt.Sprintf("HTTP %d", code)
		if err != nil {
			why = err.Error()
		}
		if time.Since(start)+wait > h.GiveUpAfter {
			d.o.Log.Error("hooks: delivery abandoned: the hook kept failing", "hook", h.Name, "breaker", ev.Breaker,
				"event", name, "id", ev.Id, "attempts", n, "for", time.Since(start).Round(time.Millisecond), "last_error", why)
			d.m.abandoned.WithLabelValues(h.Name, name).Inc()
			return true
		}
		if n == 1 {
			d.o.Log.Warn("hooks: delivery failed; retrying with backoff", "hook", h.Name, "breaker", ev.Breaker,
				"event", name, "id", ev.Id, "err", why, "give_up_after", h.GiveUpAfter)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(2*wait, h.MaxBackoff)
	}
}

func (d *Dispatcher) post(ctx context.Context, h *hookState, name string, ev *pb.Event, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "breakerd-hooks")
	id := DeliveryID(ev.Breaker, ev.Id)
	req.Header.Set(webhook.IDHeader, id)
	now := d.o.Now()
	req.Header.Set(webhook.TimestampHeader, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(webhook.SignatureHeader, webhook.Sign(h.key, id, now, body))
	req.Header.Set(HeaderEvent, name)
	req.Header.Set(HeaderDelivery, ev.Breaker+"/"+ev.Id)
	resp, err := d.o.Client.Do(req)
	if err != nil {
		// A webhook URL often carries a secret (a path token): keep it out
		// of the error, which is logged.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode/100 == 3 {
		// Not followed (CheckRedirect); the Location stays out of the log
		// for the same reason the URL does.
		return resp.StatusCode, fmt.Errorf("HTTP %d redirect refused: hooks never follow redirects; point the hook at the final URL", resp.StatusCode)
	}
	return resp.StatusCode, nil
}

// heartbeat keeps the entry this daemon is delivering fresh (idle below
// MinIdle), so no other daemon reclaims it while a slow hook is retried.
// If another consumer holds it (this daemon stalled past MinIdle), it
// records that consumer in hs.owner and cancels the delivery. If no
// consumer holds it because the stream was trimmed past it (Redis 7's
// XCLAIM drops such entries from the pending list), it sets hs.trimmed,
// logs it, and stops: the delivery goes on from what this daemon holds.
func (d *Dispatcher) heartbeat(ctx context.Context, cancel func(), hs *heartbeatState, h *hookState, key, id string) {
	t := time.NewTicker(max(d.o.MinIdle/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p, err := d.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: h.group, Start: id, End: id, Count: 1}).Result()
		if err != nil {
			continue
		}
		if len(p) == 1 && p[0].Consumer == d.o.Consumer {
			// XCLAIM answers only the entries the stream still holds.
			ids, err := d.rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: key, Group: h.group, Consumer: d.o.Consumer, Messages: []string{id}}).Result()
			if err == nil && len(ids) == 0 {
				d.trimmed(hs, h, key, id)
				return
			}
			continue
		}
		if len(p) == 1 {
			owner := p[0].Consumer
			hs.owner.Store(&owner)
			cancel()
			return
		}
		// Pending nowhere: trimmed, or taken over and acknowledged.
		still, err := d.rdb.XRange(ctx, key, id, id).Result()
		if err != nil {
			continue
		}
		if len(still) == 0 {
			d.trimmed(hs, h, key, id)
			return
		}
		owner := "another consumer, which acknowledged it"
		hs.owner.Store(&owner)
		cancel()
		return
	}
}

func (d *Dispatcher) trimmed(hs *heartbeatState, h *hookState, key, id string) {
	hs.trimmed.Store(true)
	d.o.Log.Warn("hooks: the event in delivery was trimmed from its stream (raise --events-max-len); delivering it from memory",
		"hook", h.Name, "stream", key, "id", id)
}

func (d *Dispatcher) ack(ctx context.Context, h *hookState, key, id string) {
	if err := d.rdb.XAck(ctx, key, h.group, id).Err(); err != nil && ctx.Err() == nil {
		// Unacknowledged, the entry is reclaimed after MinIdle and sent
		// again: a duplicate, never a loss.
		d.o.Log.Warn("hooks: ack failed; the event may be delivered twice", "hook", h.Name, "stream", key, "id", id, "err", err)
	}
}

func payload(name string, e *pb.Event) Payload {
	return Payload{Event: name, View: events.ViewOf(e)}
}
