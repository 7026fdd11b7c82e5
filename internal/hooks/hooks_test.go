package hooks_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/hooks"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

const secret = "hook-secret-for-tests-0123456789abcdef" // a raw secret of at least 32 bytes

// receiver is a fake webhook endpoint that records every request that
// reaches it: the wire is the witness.
type receiver struct {
	srv *httptest.Server

	mu     sync.Mutex
	status int           // answer to give
	hold   chan struct{} // while non-nil, requests wait for it (or for their own cancellation)
	got    []request
	seen   chan struct{} // signalled on every request's arrival
}

type request struct {
	delivery, event, signature string
	header                     http.Header
	body                       []byte
	status                     int // what was answered; 0 when the caller went away first
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{status: http.StatusOK, seen: make(chan struct{}, 1000)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		rq := request{delivery: req.Header.Get(hooks.HeaderDelivery), event: req.Header.Get(hooks.HeaderEvent),
			signature: req.Header.Get(client.WebhookSignatureHeader), header: req.Header.Clone(), body: body}
		r.mu.Lock()
		hold, status := r.hold, r.status
		r.mu.Unlock()
		r.seen <- struct{}{}
		if hold != nil {
			select {
			case <-hold:
			case <-req.Context().Done():
				r.record(rq)
				return
			}
		}
		rq.status = status
		r.record(rq)
		w.WriteHeader(status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) record(rq request) {
	r.mu.Lock()
	r.got = append(r.got, rq)
	r.mu.Unlock()
}

func (r *receiver) set(status int) {
	r.mu.Lock()
	r.status = status
	r.mu.Unlock()
}

func (r *receiver) requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.got...)
}

// accepted returns the requests answered 2xx, by delivery id.
func (r *receiver) accepted() map[string][]request {
	out := map[string][]request{}
	for _, rq := range r.requests() {
		if rq.status/100 == 2 {
			out[rq.delivery] = append(out[rq.delivery], rq)
		}
	}
	return out
}

func hookOptions(b *testredis.Backend, r *receiver, reg prometheus.Registerer, mod func(*hooks.Hook)) *hooks.Options {
	h := hooks.Hook{
		Name:     b.Prefix + "oncall",
		URL:      r.srv.URL,
		Events:   hooks.Events,
		Breakers: []string{b.Prefix + "*"},
		Secret:   secret,
		Timeout:  5 * time.Second,
		Backoff:  10 * time.Millisecond,
	}
	if mod != nil {
		mod(&h)
	}
	return &hooks.Options{Hooks: []hooks.Hook{h}, MinIdle: time.Minute, Sweep: 50 * time.Millisecond, Registerer: reg}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	daemontest.Eventually(t, what, cond)
}

// settled reports whether the hook's group on breaker's stream has read
// every entry and has none pending: no daemon can deliver any of them again.
func settled(t *testing.T, b *testredis.Backend, group, breaker string) bool {
	t.Helper()
	ctx := context.Background()
	key := store.EventsKey(breaker)
	last, err := b.Client.XRevRangeN(ctx, key, "+", "-", 1).Result()
	if err != nil || len(last) == 0 {
		return false
	}
	groups, err := b.Client.XInfoGroups(ctx, key).Result()
	if err != nil {
		return false
	}
	for _, g := range groups {
		if g.Name == group {
			return g.Pending == 0 && g.LastDeliveredID == last[0].ID
		}
	}
	return false
}

// trip opens breaker: 4 timeouts from w1 and 1 from w2.
func trip(t *testing.T, st *store.Store, breaker string) {
	t.Helper()
	ctx := context.Background()
	for _, w := range []string{"w1", "w1", "w1", "w1", "w2"} {
		a, err := st.Allow(ctx, breaker, w)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Record(ctx, &pb.RecordRequest{Breaker: breaker, WorkerId: w, Ticket: a.Ticket, Outcome: pb.Outcome_OUTCOME_TIMEOUT}); err != nil {
			t.Fatal(err)
		}
	}
	if s, _ := st.Get(ctx, breaker); s.GetState() != pb.State_STATE_OPEN {
		t.Fatalf("trip(%q): state %v, want OPEN", breaker, s.GetState())
	}
}

func TestOneDeliveryPerEventAcrossThreeDaemons(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		r := newReceiver(t)
		var ds []*daemontest.Daemon
		for range 3 {
			ds = append(ds, daemontest.StartWith(t, b, daemontest.Options{Hooks: hookOptions(b, r, nil, nil)}))
		}
		ctx := context.Background()
		name := b.Breaker("web_search")
		group := "hook:" + b.Prefix + "oncall"

		// opened, then half_open (no hook event), then closed, then an
		// operator's force: three deliveries, each once.
		trip(t, ds[0].Store, name)
		b.Advance(36 * time.Second) // the cooldown with the most jitter
		a, err := ds[1].Store.Allow(ctx, name, "w3")
		if err != nil || a.Decision != pb.Decision_DECISION_PROBE {
			t.Fatalf("Allow after the cooldown = %v, %v; want PROBE", a.GetDecision(), err)
		}
		if _, err := ds[2].Store.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w3", Ticket: a.Ticket, Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
			t.Fatal(err)
		}
		if _, err := ds[0].Store.Force(ctx, name, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance", 0, "alice"); err != nil {
			t.Fatal(err)
		}

		waitFor(t, "three accepted deliveries and a settled group", func() bool {
			return len(r.accepted()) == 3 && settled(t, b, group, name)
		})
		var events []string
		for id, rqs := range r.accepted() {
			if len(rqs) != 1 {
				t.Errorf("delivery %s accepted %d times, want once", id, len(rqs))
			}
			rq := rqs[0]
			if !signedBy(secret, rq) {
				t.Errorf("delivery %s: signature %q does not match the body", id, rq.signature)
			}
			var p hooks.Payload
			if err := json.Unmarshal(rq.body, &p); err != nil {
				t.Fatalf("delivery %s: body %s: %v", id, rq.body, err)
			}
			if p.Breaker != name || p.Event != rq.event || id != name+"/"+p.ID {
				t.Errorf("delivery %s: payload %+v, header event %q", id, p, rq.event)
			}
			events = append(events, p.Event)
		}
		want := map[string]bool{"opened": true, "closed": true, "forced": true}
		for _, e := range events {
			if !want[e] {
				t.Errorf("delivered event %q, want only opened, closed, forced", e)
			}
			delete(want, e)
		}
		if len(want) != 0 {
			t.Errorf("events %v were not delivered", want)
		}
		if n := len(r.requests()); n != 3 {
			t.Errorf("the hook received %d requests, want 3 (one per event, no retries)", n)
		}
	})
}

func TestDeliveryRetriedUntilTheHookComesBack(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		r := newReceiver(t)
		r.set(http.StatusServiceUnavailable)
		var regs []*prometheus.Registry
		var ds []*daemontest.Daemon
		for range 3 {
			reg := prometheus.NewRegistry()
			regs = append(regs, reg)
			ds = append(ds, daemontest.StartWith(t, b, daemontest.Options{Hooks: hookOptions(b, r, reg, nil)}))
		}
		name := b.Breaker("web_search")
		hook := b.Prefix + "oncall"
		sum := func(metric, event string) float64 {
			n := 0.0
			for _, reg := range regs {
				n += counter(t, reg, metric, hook, event)
			}
			return n
		}

		trip(t, ds[0].Store, name)
		waitFor(t, "three failed attempts", func() bool { return len(r.requests()) >= 3 })
		// An event raised while the hook is down waits its turn.
		if _, err := ds[1].Store.Force(context.Background(), name, pb.ForceMode_FORCE_MODE_OPEN, "maintenance", 0, "alice"); err != nil {
			t.Fatal(err)
		}
		if len(r.accepted()) != 0 {
			t.Fatalf("accepted while the hook was down")
		}
		r.set(http.StatusOK)
		waitFor(t, "both events accepted", func() bool {
			return len(r.accepted()) == 2 && settled(t, b, "hook:"+hook, name)
		})
		for id, rqs := range r.accepted() {
			if len(rqs) != 1 {
				t.Errorf("delivery %s accepted %d times, want once", id, len(rqs))
			}
		}
		attempts := map[string]int{}
		ids := map[string]map[string]bool{} // event -> webhook-ids of its attempts
		for _, rq := range r.requests() {
			attempts[rq.event]++
			if ids[rq.event] == nil {
				ids[rq.event] = map[string]bool{}
			}
			ids[rq.event][rq.header.Get(client.WebhookIDHeader)] = true
			// Each attempt is signed afresh, at its own timestamp.
			sec, _ := strconv.ParseInt(rq.header.Get(client.WebhookTimestampHeader), 10, 64)
			if err := client.VerifyWebhook(secret, rq.header, rq.body, time.Unix(sec, 0)); err != nil {
				t.Errorf("attempt of %s does not verify: %v", rq.event, err)
			}
		}
		for e, set := range ids {
			if len(set) != 1 {
				t.Errorf("attempts of %s carried webhook-ids %v, want one id for every retry", e, set)
			}
		}
		if attempts["opened"] < 3 {
			t.Errorf("attempts by event %v, want >= 3 for opened (retried)", attempts)
		}
		for _, e := range []string{"opened", "forced"} {
			if got := sum("breakerd_webhook_deliveries_total", e); got != 1 {
				t.Errorf("deliveries{%s} = %v across the daemons, want 1", e, got)
			}
			if got := sum("breakerd_webhook_failures_total", e); got != float64(attempts[e]-1) {
				t.Errorf("failures{%s} = %v across the daemons, want %d (every attempt but the last)", e, got, attempts[e]-1)
			}
		}
	})
}

// counter returns the value of counter name{hook, event} in reg (0 when
// it has not been counted yet).
func counter(t *testing.T, reg *prometheus.Registry, name, hook, event string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["hook"] == hook && labels["event"] == event {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// holder returns the consumer the entry of breaker's stream is pending on.
func holder(t *testing.T, b *testredis.Backend, group, breaker string) string {
	t.Helper()
	p, err := b.Client.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: store.EventsKey(breaker), Group: group, Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(p) != 1 {
		t.Fatalf("XPENDING = %v, %v; want one entry", p, err)
	}
	return p[0].Consumer
}

func TestDeliveryReclaimedAfterADaemonDies(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		r := newReceiver(t)
		hold := make(chan struct{})
		r.mu.Lock()
		r.hold = hold
		r.mu.Unlock()
		// Long enough that a live daemon's refresh (every MinIdle/3) is
		// never late under -race on a busy machine.
		const minIdle = time.Second
		group := "hook:" + b.Prefix + "oncall"
		daemons := map[string]*daemontest.Daemon{}
		for i := range 3 {
			o := hookOptions(b, r, nil, nil)
			o.MinIdle = minIdle
			o.Consumer = fmt.Sprintf("daemon-%d", i)
			daemons[o.Consumer] = daemontest.StartWith(t, b, daemontest.Options{Hooks: o})
		}
		name := b.Breaker("web_search")
		trip(t, daemons["daemon-0"].Store, name)
		<-r.seen // one daemon is mid-delivery: kill that one
		owner := holder(t, b, group, name)
		daemons[owner].Stop()
		waitFor(t, "the killed delivery to end", func() bool { return len(r.requests()) == 1 })
		r.mu.Lock()
		r.hold = nil
		r.mu.Unlock()
		close(hold)

		// A survivor reclaims the entry once it has been idle MinIdle.
		b.Advance(minIdle) // miniredis's idle clock; a real Redis's runs by itself
		waitFor(t, "the reclaimed delivery", func() bool {
			return len(r.accepted()) == 1 && settled(t, b, group, name)
		})
		rqs := r.requests()
		if len(rqs) != 2 || rqs[0].delivery != rqs[1].delivery || rqs[0].status != 0 || rqs[1].status != http.StatusOK {
			t.Fatalf("requests %+v, want the killed attempt then one accepted retry of the same event", rqs)
		}
	})
}

func TestSlowDeliveryIsNotTakenOver(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		r := newReceiver(t)
		hold := make(chan struct{})
		r.mu.Lock()
		r.hold = hold
		r.mu.Unlock()
		// A real Redis counts idle time by its own clock: MinIdle leaves a
		// busy machine's heartbeat (every MinIdle/3) room to run late, and
		// the hook's timeout outlasts the two MinIdles it is held.
		minIdle := 2 * time.Second
		if b.Mini == nil {
			minIdle = 5 * time.Second
		}
		for i := range 2 {
			o := hookOptions(b, r, nil, func(h *hooks.Hook) { h.Timeout = 5 * minIdle })
			o.MinIdle = minIdle
			o.Consumer = fmt.Sprintf("daemon-%d", i)
			d := daemontest.StartWith(t, b, daemontest.Options{Hooks: o})
			if i == 0 {
				trip(t, d.Store, b.Breaker("web_search"))
			}
		}
		<-r.seen
		// The hook takes two MinIdles to answer; the other daemon sweeps
		// all along but must not take the live delivery over.
		liveFor(t, b, "hook:"+b.Prefix+"oncall", b.Breaker("web_search"), 2*minIdle)
		r.mu.Lock()
		r.hold = nil
		r.mu.Unlock()
		close(hold)
		waitFor(t, "the delivery", func() bool {
			return len(r.accepted()) == 1 && settled(t, b, "hook:"+b.Prefix+"oncall", b.Breaker("web_search"))
		})
		if n := len(r.requests()); n != 1 {
			t.Fatalf("the hook got %d requests, want 1 (no takeover of a live delivery)", n)
		}
	})
}

// liveFor lets a delivery of group's on breaker's stream stay pending
// for d, with its heartbeat running. On miniredis, whose idle clock is
// the test's, the clock moves d/4 (a MinIdle/2 for d = 2 MinIdles) at a
// time, each step once the heartbeat has refreshed the entry: a busy
// host slows the steps, never the heartbeat past MinIdle. Real Redis
// counts idle time by its own clock: d passes in real time. Either way
// the delivery's own timeout must be longer than the real time taken.
func liveFor(t *testing.T, b *testredis.Backend, group, breaker string, d time.Duration) {
	t.Helper()
	if b.Mini == nil {
		time.Sleep(d)
		return
	}
	step := d / 4
	ctx := context.Background()
	for moved := time.Duration(0); moved < d; moved += step {
		b.Advance(step)
		waitFor(t, "the heartbeat to refresh the delivery", func() bool {
			p, err := b.Client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: store.EventsKey(breaker), Group: group, Start: "-", End: "+", Count: 1}).Result()
			return err == nil && len(p) == 1 && p[0].Idle < step
		})
	}
}

func TestDeliveryGivesUpAfterABoundedTime(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		r := newReceiver(t)
		r.set(http.StatusInternalServerError)
		reg := prometheus.NewRegistry()
		var logs daemontest.Buffer
		o := hookOptions(b, r, reg, func(h *hooks.Hook) { h.GiveUpAfter = time.Second }) // room for retries on a busy host
		o.Log = slog.New(slog.NewTextHandler(&logs, nil))
		d := daemontest.StartWith(t, b, daemontest.Options{Hooks: o})
		name := b.Breaker("web_search")
		trip(t, d.Store, name)
		hook := b.Prefix + "oncall"
		waitFor(t, "the event to be given up and acknowledged", func() bool {
			return counter(t, reg, "breakerd_webhook_abandoned_total", hook, "opened") == 1 &&
				settled(t, b, "hook:"+hook, name)
		})
		if n := len(r.requests()); n < 2 {
			t.Errorf("%d attempts before giving up, want retries", n)
		}
		if s := logs.String(); !strings.Contains(s, "delivery abandoned") || !strings.Contains(s, name) || strings.Contains(s, secret) {
			t.Errorf("log %q: want an abandonment line naming the breaker, and no secret", s)
		}
	})
}

func TestHooksFilterEventsAndBreakers(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		r := newReceiver(t)
		d := daemontest.StartWith(t, b, daemontest.Options{Hooks: hookOptions(b, r, nil, func(h *hooks.Hook) {
			h.Events = []string{hooks.EventForced}
			h.Breakers = []string{b.Prefix + "stripe:*"}
		})})
		ctx := context.Background()
		other, stripe := b.Breaker("web_search"), b.Breaker("stripe:acct_42")
		for _, n := range []string{other, stripe} {
			trip(t, d.Store, n)
			if _, err := d.Store.Force(ctx, n, pb.ForceMode_FORCE_MODE_AUTO, "", 0, "alice"); err != nil {
				t.Fatal(err)
			}
		}
		group := "hook:" + b.Prefix + "oncall"
		waitFor(t, "the stripe stream settled", func() bool { return settled(t, b, group, stripe) })
		acc := r.accepted()
		if len(acc) != 1 || len(r.requests()) != 1 {
			t.Fatalf("accepted %v, want only the stripe breaker's forced event", acc)
		}
		for _, rqs := range acc {
			if rqs[0].event != "forced" || !strings.HasPrefix(rqs[0].delivery, stripe+"/") {
				t.Errorf("delivered %s %s, want forced on %s", rqs[0].event, rqs[0].delivery, stripe)
			}
		}
		// The other breaker's stream never got the group.
		groups, _ := b.Client.XInfoGroups(ctx, store.EventsKey(other)).Result()
		if len(groups) != 0 {
			t.Errorf("groups on an unmatched breaker's stream: %v", groups)
		}
	})
}

func TestNewHookStartsAtItsFirstConfiguration(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		r := newReceiver(t)
		name := b.Breaker("web_search")
		// History from before any daemon had the hook.
		plain := daemontest.Start(t, b, store.Options{})
		trip(t, plain.Store, name)
		if b.Mini != nil {
			b.Advance(time.Second) // stream ids and TIME on miniredis follow its clock
		} else {
			time.Sleep(5 * time.Millisecond) // let Redis's ms clock pass the old entries' ids
		}
		d := daemontest.StartWith(t, b, daemontest.Options{Hooks: hookOptions(b, r, nil, nil)})
		if _, err := d.Store.Force(context.Background(), name, pb.ForceMode_FORCE_MODE_AUTO, "", 0, "alice"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the force delivered", func() bool { return settled(t, b, "hook:"+b.Prefix+"oncall", name) })
		if rqs := r.requests(); len(rqs) != 1 || rqs[0].event != "forced" {
			t.Fatalf("requests %+v, want only the forced event (not the older trip)", rqs)
		}
	})
}

func TestParse(t *testing.T) {
	t.Parallel()
	fromEnv := "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	env := func(k string) string { return map[string]string{"S": fromEnv}[k] }
	good := `
hooks:
  - name: oncall
    url: https://hooks.example.com/x
    events: [opened, stuck_open]
    secret_env: S
    timeout: 2s
    give_up_after: 10m
`
	hs, err := hooks.Parse([]byte(good), env)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].Secret != fromEnv || hs[0].Timeout != 2*time.Second || hs[0].GiveUpAfter != 10*time.Minute {
		t.Fatalf("Parse = %+v", hs)
	}
	const s32 = `secret: "0123456789abcdef0123456789abcdef"` // 32 bytes, the least
	for _, c := range []struct{ yaml, want string }{
		{`hooks: [{name: a, url: "ftp://x", events: [opened], ` + s32 + `}]`, "hooks[0].url:"},
		{`hooks: [{name: a, url: "https://x", events: [exploded], ` + s32 + `}]`, "hooks[0].events[0]:"},
		{`hooks: [{name: a, url: "https://x", events: [opened]}]`, "hooks[0].secret:"},
		{`hooks: [{name: a, url: "https://x", events: [opened], secret_env: UNSET}]`, "hooks[0].secret_env: UNSET is not set"},
		{`hooks: [{name: a, url: "https://x", events: [opened], ` + s32 + `}, {name: a, url: "https://y", events: [opened], ` + s32 + `}]`, "hooks[1].name:"},
		{`hooks: [{name: a, url: "https://x", events: [opened], ` + s32 + `, timeout: soon}]`, "not a duration"},
		{`hooks: [{name: a, url: "https://x", events: [opened], ` + s32 + `, colour: red}]`, "colour"},
		// A hook's transport: https except to loopback, and a 32-byte key.
		{`hooks: [{name: a, url: "http://hooks.example.com/T0/secret-path", events: [opened], ` + s32 + `}]`, "hooks[0].url: must be https:// unless the host is loopback"},
		{`hooks: [{name: a, url: "http://10.0.0.5/x", events: [opened], ` + s32 + `}]`, "hooks[0].url: must be https://"},
		{`hooks: [{name: a, url: "https://x", events: [opened], secret: "0123456789abcdef0123456789abcde"}]`, "hooks[0].secret: the key must be at least 32 bytes, got 31"},
		{`hooks: [{name: a, url: "https://x", events: [opened], secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}]`, "hooks[0].secret: the key must be at least 32 bytes, got 24"},
		{`hooks: [{name: a, url: "https://x", events: [opened], secret: "whsec_not base64"}]`, "hooks[0].secret: after \"whsec_\" comes base64"},
	} {
		_, err := hooks.Parse([]byte(c.yaml), env)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", c.yaml, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret-path") {
			t.Errorf("Parse error %q quotes the URL's path (often a token)", err)
		}
	}
	for _, ok := range []string{"http://127.0.0.1:8080/hook", "http://localhost/hook", "http://[::1]:9/hook", "https://hooks.example.com/x"} {
		if _, err := hooks.Parse([]byte(`hooks: [{name: a, url: "`+ok+`", events: [opened], `+s32+`}]`), env); err != nil {
			t.Errorf("url %s: %v, want accepted", ok, err)
		}
	}
}

func TestEventName(t *testing.T) {
	t.Parallel()
	tr := pb.EventKind_EVENT_KIND_TRANSITION
	for _, c := range []struct {
		e    *pb.Event
		want string
	}{
		{&pb.Event{Kind: tr, From: pb.State_STATE_CLOSED, To: pb.State_STATE_OPEN}, "opened"},
		{&pb.Event{Kind: tr, From: pb.State_STATE_HALF_OPEN, To: pb.State_STATE_OPEN}, ""},
		{&pb.Event{Kind: tr, From: pb.State_STATE_OPEN, To: pb.State_STATE_HALF_OPEN}, ""},
		{&pb.Event{Kind: tr, From: pb.State_STATE_HALF_OPEN, To: pb.State_STATE_CLOSED}, "closed"},
		{&pb.Event{Kind: tr, From: pb.State_STATE_FORCED_OPEN, To: pb.State_STATE_CLOSED}, "closed"},
		{&pb.Event{Kind: pb.EventKind_EVENT_KIND_FORCED}, "forced"},
		{&pb.Event{Kind: pb.EventKind_EVENT_KIND_STUCK_OPEN}, "stuck_open"},
		{&pb.Event{Kind: pb.EventKind_EVENT_KIND_SUSPECT_WORKER}, "suspect_worker"},
		{&pb.Event{Kind: pb.EventKind_EVENT_KIND_OPEN_FRACTION_CAP}, "open_fraction_cap"},
		{&pb.Event{Kind: pb.EventKind_EVENT_KIND_CREDENTIAL_REVOKED}, "credential_revoked"},
	} {
		if got := hooks.EventName(c.e); got != c.want {
			t.Errorf("EventName(%v) = %q, want %q", c.e, got, c.want)
		}
	}
}

func TestStreamThatExpiredGetsItsGroupBack(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		r := newReceiver(t)
		d := daemontest.StartWith(t, b, daemontest.Options{Hooks: hookOptions(b, r, nil, nil)})
		ctx := context.Background()
		name := b.Breaker("web_search")
		group := "hook:" + b.Prefix + "oncall"
		trip(t, d.Store, name)
		waitFor(t, "the trip delivered", func() bool { return settled(t, b, group, name) })
		// The event log expires (with its group); the next event makes a
		// new stream.
		if err := b.Client.Del(ctx, store.EventsKey(name)).Err(); err != nil {
			t.Fatal(err)
		}
		b.Advance(time.Second) // a new stream's ids follow the clock (miniredis's stands still)
		if _, err := d.Store.Force(ctx, name, pb.ForceMode_FORCE_MODE_AUTO, "", 0, "alice"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the force delivered on the new stream", func() bool { return settled(t, b, group, name) })
		if acc := r.accepted(); len(acc) != 2 || len(r.requests()) != 2 {
			t.Fatalf("accepted %d events in %d requests, want 2 in 2", len(acc), len(r.requests()))
		}
	})
}

func TestHookURLStaysOutOfTheLog(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	var logs daemontest.Buffer
	// Nothing listens there; the path stands for a secret such as a chat
	// webhook's token.
	o := hookOptions(b, newReceiver(t), nil, func(h *hooks.Hook) {
		h.URL = "http://" + testredis.FreeAddr(t) + "/services/T0/B0/secret-path-token"
		h.GiveUpAfter = 50 * time.Millisecond
	})
	o.Log = slog.New(slog.NewTextHandler(&logs, nil))
	d := daemontest.StartWith(t, b, daemontest.Options{Hooks: o})
	name := b.Breaker("web_search")
	trip(t, d.Store, name)
	waitFor(t, "the abandonment", func() bool { return settled(t, b, "hook:"+b.Prefix+"oncall", name) })
	s := logs.String()
	if !strings.Contains(s, "connection refused") || strings.Contains(s, "secret-path-token") {
		t.Errorf("log %q: want the failure's cause without the URL", s)
	}
}

// TestDeliveriesFollowStandardWebhooks: a receiver that checks deliveries
// with client.VerifyWebhook takes the daemon's, and refuses the same
// request replayed after the tolerance and one with a tampered body.
func TestDeliveriesFollowStandardWebhooks(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	r := newReceiver(t)
	sentAt := time.Unix(1_800_000_000, 0)
	o := hookOptions(b, r, nil, func(h *hooks.Hook) {
		h.Secret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	})
	o.Now = func() time.Time { return sentAt }
	d := daemontest.StartWith(t, b, daemontest.Options{Hooks: o})
	name := b.Breaker("web_search")
	trip(t, d.Store, name)
	waitFor(t, "the delivery", func() bool { return len(r.accepted()) == 1 })
	rq := r.requests()[0]
	var p hooks.Payload
	if err := json.Unmarshal(rq.body, &p); err != nil {
		t.Fatal(err)
	}
	secret := o.Hooks[0].Secret
	if got, want := rq.header.Get(client.WebhookIDHeader), hooks.DeliveryID(name, p.ID); got != want {
		t.Errorf("webhook-id = %q, want %q", got, want)
	}
	if got := rq.header.Get(client.WebhookTimestampHeader); got != "1800000000" {
		t.Errorf("webhook-timestamp = %q, want the sender's clock in Unix seconds", got)
	}
	if !signedBy(secret, rq) {
		t.Errorf("webhook-signature %q does not match the delivery", rq.signature)
	}

	// A receiver on its own clock: 401 for anything VerifyWebhook refuses.
	var receiverNow atomic.Int64
	var refused atomic.Int64
	verifier := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if err := client.VerifyWebhook(secret, req.Header, body, time.Unix(receiverNow.Load(), 0)); err != nil {
			refused.Add(1)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer verifier.Close()
	resend := func(body []byte) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, verifier.URL, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = rq.header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name string
		at   time.Time
		body []byte
		want int
	}{
		{"as delivered, a second later", sentAt.Add(time.Second), rq.body, http.StatusNoContent},
		{"replayed 10 minutes later", sentAt.Add(10 * time.Minute), rq.body, http.StatusUnauthorized},
		{"tampered body", sentAt.Add(time.Second), bytes.Replace(rq.body, []byte(`"opened"`), []byte(`"closed"`), 1), http.StatusUnauthorized},
	} {
		receiverNow.Store(tc.at.Unix())
		if got := resend(tc.body); got != tc.want {
			t.Errorf("%s: the verifying receiver answered %d, want %d", tc.name, got, tc.want)
		}
	}
	if n := refused.Load(); n != 2 {
		t.Errorf("the receiver refused %d requests, want 2 (the replay and the tampered body)", n)
	}
}

// TestRedirectsAreNotFollowed: a hook answering 307 to another host gets
// its attempts counted as failures; the other host never sees the signed
// body.
func TestRedirectsAreNotFollowed(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	elsewhere := newReceiver(t)
	var redirected atomic.Int64
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		redirected.Add(1)
		http.Redirect(w, req, elsewhere.srv.URL+"/collect", http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	reg := prometheus.NewRegistry()
	var logs daemontest.Buffer
	o := hookOptions(b, elsewhere, reg, func(h *hooks.Hook) {
		h.URL = redirector.URL
		// Long enough for retries 10 ms apart on a busy host (a refused
		// redirect is a failed attempt), short enough to see it given up.
		h.GiveUpAfter = time.Second
	})
	o.Log = slog.New(slog.NewTextHandler(&logs, nil))
	d := daemontest.StartWith(t, b, daemontest.Options{Hooks: o})
	name := b.Breaker("web_search")
	trip(t, d.Store, name)
	hook := b.Prefix + "oncall"
	waitFor(t, "the redirected event to be given up", func() bool {
		return counter(t, reg, "breakerd_webhook_abandoned_total", hook, "opened") == 1 && settled(t, b, "hook:"+hook, name)
	})
	if n := redirected.Load(); n < 2 {
		t.Errorf("the redirecting hook saw %d attempts, want retries", n)
	}
	if n := len(elsewhere.requests()); n != 0 {
		t.Errorf("the redirect target received %d requests, want 0", n)
	}
	if s := logs.String(); !strings.Contains(s, "redirect refused") || strings.Contains(s, "/collect") {
		t.Errorf("log %q: want the refused redirect, without its Location", s)
	}
}

// TestEventTrimmedInDeliveryIsStillDelivered trims an event while its delivery retries: with
// --events-max-len 10, a hook answering 500 while 400 more events arrive
// in a burst, the event being retried is trimmed from its stream. The
// daemon delivers it from the copy it holds once the hook recovers, and
// never claims another daemon took it over (there is none).
func TestEventTrimmedInDeliveryIsStillDelivered(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		r := newReceiver(t)
		r.set(http.StatusInternalServerError)
		reg := prometheus.NewRegistry()
		var logs daemontest.Buffer
		o := hookOptions(b, r, reg, nil)
		o.MinIdle = 300 * time.Millisecond // the heartbeat checks every 100 ms
		o.Log = slog.New(slog.NewTextHandler(&logs, nil))
		d := daemontest.StartWith(t, b, daemontest.Options{Store: store.Options{EventsMaxLen: 10}, Hooks: o})
		ctx := context.Background()
		name := b.Breaker("web_search")
		force := func(m pb.ForceMode) {
			t.Helper()
			if _, err := d.Store.Force(ctx, name, m, "burst", 0, "alice"); err != nil {
				t.Fatal(err)
			}
		}
		force(pb.ForceMode_FORCE_MODE_OPEN)
		first, err := b.Client.XRevRangeN(ctx, store.EventsKey(name), "+", "-", 1).Result()
		if err != nil || len(first) != 1 {
			t.Fatalf("the first event: %v, %v", first, err)
		}
		delivery := name + "/" + first[0].ID
		<-r.seen // in delivery, answered 500 and retried
		for i := range 400 {
			force([]pb.ForceMode{pb.ForceMode_FORCE_MODE_AUTO, pb.ForceMode_FORCE_MODE_OPEN}[i%2])
		}
		if n, err := b.Client.XLen(ctx, store.EventsKey(name)).Result(); err != nil || n > 200 {
			t.Fatalf("XLEN after 401 events with max len 10 = %d, %v; want the stream trimmed", n, err)
		}
		waitFor(t, "the trim of the event in delivery", func() bool {
			m, err := b.Client.XRange(ctx, store.EventsKey(name), first[0].ID, first[0].ID).Result()
			return err == nil && len(m) == 0
		})
		waitFor(t, "the heartbeat to notice the trim", func() bool { return strings.Contains(logs.String(), "trimmed from its stream") })
		r.set(http.StatusOK)
		waitFor(t, "the trimmed event's delivery", func() bool { return len(r.accepted()[delivery]) == 1 })
		if s := logs.String(); strings.Contains(s, "took over") {
			t.Errorf("log says another daemon took over; there is none:\n%s", s)
		}
		if n := counter(t, reg, "breakerd_webhook_abandoned_total", b.Prefix+"oncall", "forced"); n != 0 {
			t.Errorf("abandoned{forced} = %v, want 0: the event was delivered", n)
		}
	})
}

// TestTrimmedPendingEventOfAStoppedDaemonIsCounted: a daemon stops
// mid-delivery, and the stream is trimmed past the pending event before a
// survivor reclaims it. Nobody holds the event any more: the survivor logs
// it and counts it abandoned (event "trimmed") rather than losing it
// silently. It runs on the real backends only: miniredis does not
// implement XAUTOCLAIM's third reply element (the ids it dropped because
// the stream no longer holds them, Redis 7.0; a TODO in miniredis's
// cmd_stream.go).
func TestTrimmedPendingEventOfAStoppedDaemonIsCounted(t *testing.T) {
	t.Parallel()
	for _, bk := range []struct {
		name    string
		backend func(testing.TB) *testredis.Backend
	}{{"redis", testredis.Real}, {"cluster", testredis.Cluster}} {
		t.Run(bk.name, func(t *testing.T) { trimmedPendingEventIsCounted(t, bk.backend(t)) })
	}
}

func trimmedPendingEventIsCounted(t *testing.T, b *testredis.Backend) {
	r := newReceiver(t)
	hold := make(chan struct{})
	r.mu.Lock()
	r.hold = hold
	r.mu.Unlock()
	defer close(hold)
	const minIdle = time.Second
	so := store.Options{EventsMaxLen: 10}
	o1 := hookOptions(b, r, nil, nil)
	o1.MinIdle, o1.Consumer = minIdle, "daemon-1"
	d1 := daemontest.StartWith(t, b, daemontest.Options{Store: so, Hooks: o1})
	name := b.Breaker("web_search")
	ctx := context.Background()
	if _, err := d1.Store.Force(ctx, name, pb.ForceMode_FORCE_MODE_OPEN, "burst", 0, "alice"); err != nil {
		t.Fatal(err)
	}
	<-r.seen // daemon-1 is delivering it: stop it there
	d1.Stop()
	first := holder(t, b, "hook:"+b.Prefix+"oncall", name)
	if first != "daemon-1" {
		t.Fatalf("pending on %q, want daemon-1", first)
	}
	for i := range 400 {
		m := []pb.ForceMode{pb.ForceMode_FORCE_MODE_AUTO, pb.ForceMode_FORCE_MODE_OPEN}[i%2]
		if _, err := d1.Store.Force(ctx, name, m, "burst", 0, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Lock()
	r.hold = nil
	r.mu.Unlock()
	reg := prometheus.NewRegistry()
	var logs daemontest.Buffer
	o2 := hookOptions(b, r, reg, nil)
	o2.MinIdle, o2.Consumer = minIdle, "daemon-2"
	o2.Log = slog.New(slog.NewTextHandler(&logs, nil))
	daemontest.StartWith(t, b, daemontest.Options{Store: so, Hooks: o2})
	b.Advance(minIdle) // miniredis's idle clock; a real Redis's runs by itself
	waitFor(t, "the trimmed pending event to be counted", func() bool {
		return counter(t, reg, "breakerd_webhook_abandoned_total", b.Prefix+"oncall", "trimmed") == 1
	})
	if s := logs.String(); !strings.Contains(s, "trimmed from its stream while pending on a stopped daemon") {
		t.Errorf("log lacks the abandonment:\n%s", s)
	}
}

// TestShadowTripIsDeliveredMarked: a shadowed breaker's trip goes to the
// hooks that ask for "opened", marked shadow, its reason saying it would
// have opened.
func TestShadowTripIsDeliveredMarked(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		r := newReceiver(t)
		p := policy.Default()
		p.Shadow = true
		d := daemontest.StartWith(t, b, daemontest.Options{Store: store.Options{Policies: policy.NewSet(p)},
			Hooks: hookOptions(b, r, nil, func(h *hooks.Hook) { h.Events = []string{hooks.EventOpened} })})
		ctx := context.Background()
		name := b.Breaker("web_search")
		for _, w := range []string{"w1", "w1", "w1", "w1", "w2"} {
			a, err := d.Store.Allow(ctx, name, w)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Store.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: w, Ticket: a.Ticket, Outcome: pb.Outcome_OUTCOME_TIMEOUT}); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "one accepted delivery", func() bool { return len(r.accepted()) == 1 })
		for _, rqs := range r.accepted() {
			var got hooks.Payload
			if err := json.Unmarshal(rqs[0].body, &got); err != nil {
				t.Fatal(err)
			}
			if got.Event != hooks.EventOpened || !got.Shadow || got.To != "open" ||
				!strings.HasPrefix(got.Reason, "shadow mode, not enforced: would have opened: "+name+" failing") {
				t.Errorf("delivered %+v, want opened, marked shadow, would have opened", got)
			}
		}
	})
}

// signedBy reports whether rq's webhook-signature is secret's, for its
// own id and timestamp (whatever clock signed it).
func signedBy(secret string, rq request) bool {
	key, err := client.WebhookKey(secret)
	if err != nil {
		return false
	}
	sec, err := strconv.ParseInt(rq.header.Get(client.WebhookTimestampHeader), 10, 64)
	if err != nil {
		return false
	}
	return rq.signature == client.SignWebhook(key, rq.header.Get(client.WebhookIDHeader), time.Unix(sec, 0), rq.body)
}

// TestSecurityDeliveriesCarryNoReplayableSignature (L9): deliveries carry no body-only
// X-Breakerd-Signature (it signs no timestamp, so a captured delivery
// would replay forever); the Standard Webhooks signature verifies.
func TestSecurityDeliveriesCarryNoReplayableSignature(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	r := newReceiver(t)
	o := hookOptions(b, r, nil, nil)
	d := daemontest.StartWith(t, b, daemontest.Options{Hooks: o})
	name := b.Breaker("web_search")
	trip(t, d.Store, name)
	waitFor(t, "the delivery", func() bool { return len(r.accepted()) == 1 })
	rq := r.requests()[0]
	if v := rq.header.Get("X-Breakerd-Signature"); v != "" {
		t.Errorf("X-Breakerd-Signature = %q, want no body-only signature", v)
	}
	if !signedBy(o.Hooks[0].Secret, rq) {
		t.Errorf("webhook-signature %q does not verify", rq.signature)
	}
}

// slowReceiver is a webhook endpoint that answers no request until
// released: it records each request's delivery id as it arrives and,
// after the release, each one it accepted.
type slowReceiver struct {
	srv     *httptest.Server
	release chan struct{}

	mu       sync.Mutex
	inFlight []string
	accepted map[string]int
}

func newSlowReceiver(t *testing.T) *slowReceiver {
	r := &slowReceiver{release: make(chan struct{}), accepted: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		id := req.Header.Get(hooks.HeaderDelivery)
		r.mu.Lock()
		r.inFlight = append(r.inFlight, id)
		r.mu.Unlock()
		select {
		case <-r.release:
		case <-req.Context().Done():
			return
		}
		r.mu.Lock()
		r.accepted[id]++
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// arrived returns the stream ids of the requests that have arrived.
func (r *slowReceiver) arrived() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for _, d := range r.inFlight {
		ids = append(ids, d[strings.LastIndex(d, "/")+1:])
	}
	return ids
}

// TestSlowReceiverGetsEachEventOnce: a receiver slower than MinIdle per
// request, with three events waiting on one stream and two daemons, gets
// each event once. Only the entry in delivery is kept fresh, so no entry
// may wait claimed behind it: on miniredis, whose idle clock moves only
// when the test moves it, time passes in steps each after the deliveries
// in flight were refreshed, until the waiting events are past MinIdle.
func TestSlowReceiverGetsEachEventOnce(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	r := newSlowReceiver(t)
	const minIdle = 300 * time.Millisecond // the heartbeat refreshes every 100 ms
	ctx := context.Background()
	name := b.Breaker("web_search")
	opts := func(consumer string) *hooks.Options {
		o := hookOptions(b, &receiver{srv: r.srv}, nil, nil)
		o.MinIdle, o.Consumer = minIdle, consumer
		return o
	}
	// The hook dates from before the events, so that all three are its.
	if err := b.Client.Set(ctx, store.HookSinceKey(b.Prefix+"oncall"), 1, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	st := daemontest.Start(t, b, store.Options{}).Store
	for _, m := range []pb.ForceMode{pb.ForceMode_FORCE_MODE_OPEN, pb.ForceMode_FORCE_MODE_AUTO, pb.ForceMode_FORCE_MODE_OPEN} {
		if _, err := st.Force(ctx, name, m, "drill", 0, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	daemontest.StartWith(t, b, daemontest.Options{Hooks: opts("daemon-0")})
	waitFor(t, "the first delivery", func() bool { return len(r.arrived()) == 1 })
	daemontest.StartWith(t, b, daemontest.Options{Hooks: opts("daemon-1")})

	group := "hook:" + b.Prefix + "oncall"
	fresh := func() bool { // every delivery in flight was refreshed since time last moved
		for _, id := range r.arrived() {
			p, err := b.Client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: store.EventsKey(name), Group: group, Start: id, End: id, Count: 1}).Result()
			if err != nil || len(p) != 1 || p[0].Idle != 0 {
				return false
			}
		}
		return true
	}
	for range 6 { // 1.5 × MinIdle
		waitFor(t, "the deliveries in flight refreshed", fresh)
		b.Advance(minIdle / 4)
	}
	waitFor(t, "a second delivery in flight", func() bool { return len(r.arrived()) == 2 })
	close(r.release)
	waitFor(t, "every event delivered", func() bool {
		r.mu.Lock()
		n := len(r.accepted)
		r.mu.Unlock()
		return n == 3 && settled(t, b, group, name)
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, n := range r.accepted {
		if n != 1 {
			t.Errorf("delivery %s accepted %d times, want once", id, n)
		}
	}
	if len(r.inFlight) != 3 {
		t.Errorf("the hook got %d requests %v, want 3 (one per event)", len(r.inFlight), r.inFlight)
	}
}
