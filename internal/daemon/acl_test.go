package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/forgotten"
	"github.com/breakerd/breakerd/internal/hooks"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/server"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// aclUser creates a uniquely named ACL user with breakerd's rules for db
// on the real Redis, through the harness's admin connection, and deletes
// it when t ends. It returns the user and its password.
func aclUser(t *testing.T, b *testredis.Backend, db int) (string, string) {
	t.Helper()
	buf := make([]byte, 16)
	_, _ = rand.Read(buf)
	user, password := "breakerd-acltest-"+hex.EncodeToString(buf[:6]), hex.EncodeToString(buf)
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">" + password}
	for _, r := range strings.Fields(RedisACLRules(db)) {
		args = append(args, r)
	}
	ctx := context.Background()
	if err := b.Client.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Client.Do(context.Background(), "ACL", "DELUSER", user).Err(); err != nil {
			t.Errorf("ACL DELUSER %s: %v", user, err)
		}
	})
	return user, password
}

// aclDenials returns the ACL LOG entries of user: every command, key or
// channel Redis refused it.
func aclDenials(t *testing.T, b *testredis.Backend, user string) []string {
	t.Helper()
	entries, err := b.Client.ACLLog(context.Background(), 128).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Username == user {
			out = append(out, fmt.Sprintf("%s %s (%s)", e.Reason, e.Object, e.Context))
		}
	}
	return out
}

// TestRedisACL runs the daemon's own connections (store, live feed,
// hooks, health) under a user with exactly RedisACLRules, through a trip,
// a probe, a close, a Force, a Watch, List, Events, the new-breaker
// quota and hook deliveries, and checks Redis refused it nothing; then
// that the user may not run the commands a daemon never needs.
func TestRedisACL(t *testing.T) {
	b := testredis.Real(t)
	user, password := aclUser(t, b, 0)
	b.Username, b.Password = user, password
	ctx := context.Background()

	var mu sync.Mutex
	var delivered []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		delivered = append(delivered, r.Header.Get(hooks.HeaderEvent))
		mu.Unlock()
	}))
	defer hook.Close()
	// A ceiling, so that its live set's commands run under the ACL too.
	live := store.LiveKey + ":" + b.Prefix
	t.Cleanup(func() { _ = b.Client.Del(context.Background(), live).Err() })
	// A group, so that its index's commands run under the ACL too.
	group := policy.Group{Name: b.Prefix + "grp", Members: []string{b.Breaker("vendor"), b.Breaker("other")}, MaxOpenFraction: 0.5}
	gKnown, gOpen := store.GroupKeys(group.Name)
	t.Cleanup(func() { _ = b.Client.Del(context.Background(), gKnown, gOpen).Err() })
	// A savings index under the ACL's key pattern, as the daemon's is.
	saved := store.SavingsKey + ":" + b.Prefix
	t.Cleanup(func() { _ = b.Client.Del(context.Background(), saved).Err() })
	d := daemontest.StartWith(t, b, daemontest.Options{
		// The channel must match the ACL's pattern, as the daemon's does.
		Store: store.Options{Rand: func() float64 { return 0 }, Channel: store.DefaultChannel + ":" + b.Prefix,
			MaxBreakers: 1000, LiveKey: live, SavingsKey: saved, Policies: policy.NewSet(policy.Default()).WithGroups(group)},
		Limits: server.Limits{NewBreakersPerMinute: 1},
		Hooks: &hooks.Options{Hooks: []hooks.Hook{{Name: b.Prefix + "oncall", URL: hook.URL,
			Events:   []string{hooks.EventOpened, hooks.EventClosed, hooks.EventForced},
			Breakers: []string{b.Prefix + "*"}, Secret: strings.Repeat("s", 40)}},
			Sweep: 50 * time.Millisecond},
	})
	c, err := client.Dial(d.Addr, client.WithAllowBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	api := c.API()
	name := b.Breaker("vendor")

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch, err := api.Watch(wctx, &pb.WatchRequest{Breakers: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Header(); err != nil {
		t.Fatal(err)
	}

	// Trip: two workers fail until the breaker opens.
	state := pb.State_STATE_CLOSED
	for i := 0; state != pb.State_STATE_OPEN; i++ {
		if i == 40 {
			t.Fatalf("no trip after 40 failures from two workers")
		}
		w := fmt.Sprintf("w%d", i%2)
		a, err := api.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: w})
		if err != nil {
			t.Fatalf("Allow as %s: %v", w, err)
		}
		r, err := api.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: w, Ticket: a.Ticket, Outcome: pb.Outcome_OUTCOME_SERVER_ERROR})
		if err != nil {
			t.Fatalf("Record as %s: %v", w, err)
		}
		state = r.State.State
	}
	// Probe, then close on its success.
	b.Advance(d.Store.Policy(name).CooldownCap + time.Second)
	p, err := api.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w0"})
	if err != nil || p.Decision != pb.Decision_DECISION_PROBE {
		t.Fatalf("Allow after the cooldown = %v, %v; want PROBE", p.GetDecision(), err)
	}
	r, err := api.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w0", Ticket: p.Ticket, Outcome: pb.Outcome_OUTCOME_SUCCESS})
	if err != nil || r.State.State != pb.State_STATE_CLOSED {
		t.Fatalf("the probe's success = %v, %v; want CLOSED", r.GetState().GetState(), err)
	}
	// Force and release; while forced open, a denial and a client's
	// savings report are counted, and read back.
	for _, m := range []pb.ForceMode{pb.ForceMode_FORCE_MODE_OPEN, pb.ForceMode_FORCE_MODE_AUTO} {
		if _, err := api.Force(ctx, &pb.ForceRequest{Breaker: name, Mode: m, Reason: "acl drill"}); err != nil {
			t.Fatalf("Force %v: %v", m, err)
		}
		if m != pb.ForceMode_FORCE_MODE_OPEN {
			continue
		}
		if a, err := api.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w0"}); err != nil || a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN {
			t.Fatalf("Allow while forced open = %v, %v; want DENIED_FORCED_OPEN", a.GetDecision(), err)
		}
		if _, err := api.ReportSavings(ctx, &pb.ReportSavingsRequest{WorkerId: "w0", Reports: []*pb.SavingsReport{{Breaker: name, LocalDenials: 2}}}); err != nil {
			t.Fatalf("ReportSavings: %v", err)
		}
		if sv, err := api.Savings(ctx, &pb.SavingsRequest{}); err != nil || sv.GetCallsAvoided() != 3 {
			t.Fatalf("Savings = %v, %v; want 3 calls avoided", sv, err)
		}
	}
	// Reads, and the quota's EXISTS: a second new name is past the quota
	// of one, and holds no state.
	if _, err := client.ListEvery(ctx, api, &pb.ListRequest{PageSize: store.MaxPageSize}, time.Minute); err != nil {
		t.Errorf("List: %v", err)
	}
	if evs, err := api.Events(ctx, &pb.EventsRequest{Breaker: name}); err != nil || len(evs.Events) < 4 {
		t.Errorf("Events = %d, %v; want the trip, probe, close and forces", len(evs.GetEvents()), err)
	}
	if _, err := api.Get(ctx, &pb.GetRequest{Breaker: b.Breaker("other")}); err != nil {
		t.Errorf("Get: %v", err)
	}
	if _, err := api.Allow(ctx, &pb.AllowRequest{Breaker: b.Breaker("made-up"), WorkerId: "w0"}); err == nil || !strings.Contains(err.Error(), "new breakers") {
		t.Errorf("Allow of a second new breaker: %v, want the quota's refusal", err)
	}
	// SCRIPT FLUSH is the admin's: the next call falls back to EVAL.
	if err := b.Client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w0"}); err != nil {
		t.Errorf("Allow after SCRIPT FLUSH (EVAL): %v", err)
	}
	if err := d.Store.Load(ctx); err != nil {
		t.Errorf("Load (the health check): %v", err)
	}
	// The check when Redis comes back: INFO, and a lost state's alert.
	if ks, err := d.Store.Keepings(ctx); err != nil || len(ks) == 0 || !ks[0].Told {
		t.Errorf("Keepings (INFO) = %+v, %v", ks, err)
	}
	if _, err := d.Store.FindLost(ctx); err != nil {
		t.Errorf("FindLost: %v", err)
	}
	lost := forgotten.Lost{Breaker: b.Breaker("lost"), Known: breaker.State{Gen: 3, Force: "open", ForceReason: "drill", ForceBy: "alice"}}
	if raised, err := d.Store.RaiseLost(ctx, lost, "breakerd@acltest", "the pin is put back"); err != nil || !raised {
		t.Errorf("RaiseLost = %v, %v; want raised", raised, err)
	}
	t.Cleanup(func() { _ = b.Client.Del(context.Background(), store.KeysOf(lost.Breaker).Events).Err() })

	// The Watch saw the transitions; the hook got them, once each.
	var kinds []string
	for len(kinds) < 5 {
		e, err := watch.Recv()
		if err != nil {
			t.Fatalf("Watch after %v: %v", kinds, err)
		}
		if e.GetEvent() == nil { // a heartbeat
			continue
		}
		kinds = append(kinds, metricsState(e.GetEvent().GetTo()))
	}
	want := map[string]bool{"opened": true, "closed": true, "forced": true}
	daemontest.Eventually(t, "hook deliveries", func() bool {
		mu.Lock()
		defer mu.Unlock()
		seen := map[string]bool{}
		for _, e := range delivered {
			seen[e] = true
		}
		return len(seen) == len(want)
	})
	if n, err := d.Store.LiveBreakers(ctx); err != nil || n != 1 {
		t.Errorf("LiveBreakers = %d, %v; want 1 (the ceiling's live set was written)", n, err)
	}
	if denied := aclDenials(t, b, user); len(denied) > 0 {
		t.Errorf("Redis refused the daemon's user: %v", denied)
	}

	// What a daemon never needs is refused (ACL DRYRUN asks Redis).
	for _, cmd := range [][]any{
		{"FLUSHALL"}, {"FLUSHDB"}, {"SWAPDB", "0", "1"}, {"KEYS", "*"}, {"SCRIPT", "FLUSH"}, {"FUNCTION", "FLUSH"},
		{"SORT", store.Prefix + "x"}, {"OBJECT", "ENCODING", store.Prefix + "x"}, {"MIGRATE", "h", "1", "k", "0", "1"},
		{"SELECT", "1"}, {"CONFIG", "GET", "*"}, {"GET", "other:key"}, {"PUBLISH", "other-channel", "x"},
	} {
		args := append([]any{"ACL", "DRYRUN", user}, cmd...)
		if res, err := b.Client.Do(ctx, args...).Text(); err == nil && res == "OK" {
			t.Errorf("the daemon's user may run %v", cmd)
		}
	}
	for _, cmd := range [][]any{{"EVALSHA", "x", "1", store.Prefix + "{x}:state"}, {"XADD", store.Prefix + "{x}:events", "*", "a", "b"}, {"PUBLISH", store.DefaultChannel + ":db0", "x"}} {
		args := append([]any{"ACL", "DRYRUN", user}, cmd...)
		if res, err := b.Client.Do(ctx, args...).Text(); err != nil || res != "OK" {
			t.Errorf("ACL DRYRUN %v = %q, %v; want OK", cmd, res, err)
		}
	}
}

func metricsState(s pb.State) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "STATE_"))
}

// TestRedisACLSelect: a database other than 0 needs SELECT, which the
// rules for that database grant and those for database 0 do not.
func TestRedisACLSelect(t *testing.T) {
	b := testredis.Real(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	admin1 := redis.NewClient(&redis.Options{Addr: b.Addr, DB: 1})
	defer admin1.Close()
	name := b.Breaker("db1")
	t.Cleanup(func() {
		keys, _ := admin1.Keys(ctx, "brk:{"+name+"}:*").Result()
		if len(keys) > 0 {
			_ = admin1.Del(ctx, keys...).Err()
		}
	})
	for _, c := range []struct {
		rulesDB int
		works   bool
	}{{1, true}, {0, false}} {
		user, password := aclUser(t, b, c.rulesDB)
		rdb, _, closeRedis, err := connect(Config{RedisURL: fmt.Sprintf("redis://%s:%s@%s/1", user, password, b.Addr)}, log)
		if err != nil {
			t.Fatal(err)
		}
		st := store.New(rdb, store.Options{})
		err = st.Load(ctx)
		if err == nil {
			_, err = st.Allow(ctx, name, "w1")
		}
		closeRedis()
		if c.works != (err == nil) {
			t.Errorf("a redis://…/1 URL under the rules for db %d: %v; want works=%v", c.rulesDB, err, c.works)
		}
		if err != nil && strings.Contains(err.Error(), password) {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

// TestDocsShowTheACL: docs/security.md's ACL, and the one the compose
// secrets script writes, are the one the code runs under.
func TestDocsShowTheACL(t *testing.T) {
	script, err := os.ReadFile("../../scripts/compose-secrets.sh")
	if err != nil {
		t.Fatal(err)
	}
	if want := RedisACLRules(0); !strings.Contains(string(script), want) {
		t.Errorf("scripts/compose-secrets.sh lacks the rules:\n%s", want)
	}
	b, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, db := range []int{0, 1} {
		if want := RedisACLSetUser("breakerd", "<password>", db); !strings.Contains(string(b), want) {
			t.Errorf("docs/security.md lacks the ACL for db %d:\n%s", db, want)
		}
	}
}

// TestRedisACLDaemonLoops runs the real assembly (Run) as a user with
// exactly RedisACLRules, with every loop of the daemon busy: the health
// check (baseConfig's, every second, each check bounded by that: a bound
// of 100 ms on a host busy with other suites let none pass), policy and
// hooks reloads, a hook delivery, a recovery check that half-opens a
// breaker, the savings flush, the circuits gauge's List, and the keeping
// check when Redis answers first. Its log must hold no NOPERM, and Redis
// must have refused the user nothing.
func TestRedisACLDaemonLoops(t *testing.T) {
	b := testredis.Real(t)
	user, password := aclUser(t, b, 0)
	var delivered atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		delivered.Add(1)
	}))
	defer hook.Close()
	vendor := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer vendor.Close()
	dir := t.TempDir()
	policyFile, hooksFile := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "hooks.yaml")
	policyText := func(threshold int) string {
		return fmt.Sprintf("breakers:\n  - match: %q\n    threshold: %d\n    min_workers: 1\n    cooldown_base: 1h\n    cooldown_cap: 2h\n"+
			"    recovery_check_interval: 200ms\n    recovery_check:\n      http: {url: %q}\n      timeout: 150ms\n", b.Prefix+"*", threshold, vendor.URL+"/status")
	}
	writeFile(t, policyFile, policyText(1))
	writeFile(t, hooksFile, "hooks:\n  - {name: acl, url: \""+hook.URL+"\", events: [forced], breakers: [\""+b.Prefix+"*\"], secret: "+strings.Repeat("s", 40)+"}\n")
	c := baseConfig(t)
	c.RedisURL = fmt.Sprintf("redis://%s:%s@%s", user, password, b.Addr)
	c.PolicyFile, c.HooksFile, c.ConfigPoll = policyFile, hooksFile, 50*time.Millisecond
	c.MetricsListen, c.CircuitsInterval, c.MaxBreakerSeries = testredis.FreeAddr(t), 100*time.Millisecond, 1<<20
	logs := &daemontest.Buffer{}
	addr := startRun(t, c, NewLogger(c, logs), logs)
	cl, err := client.Dial(addr, client.WithWorkerID("w1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	api, ctx, name := cl.API(), context.Background(), b.Breaker("vendor")
	// The health check passed, and ran the keeping check (INFO, and the
	// lost states' scripts) as it does when Redis answers first.
	daemontest.Eventually(t, "the health check to pass", func() bool { return strings.Contains(logs.String(), "redis ready") })

	// A trip, half-opened by the recovery check.
	a, err := api.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := api.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: a.Ticket, Outcome: pb.Outcome_OUTCOME_SERVER_ERROR}); err != nil || r.State.GetState() != pb.State_STATE_OPEN {
		t.Fatalf("trip: %v, %v", r.GetState().GetState(), err)
	}
	daemontest.Eventually(t, "the recovery check to half-open the breaker", func() bool {
		st, err := api.Get(ctx, &pb.GetRequest{Breaker: name})
		return err == nil && st.GetState().GetState() == pb.State_STATE_HALF_OPEN
	})
	// A Force: a hook delivery; a denial: the savings flush.
	if _, err := api.Force(ctx, &pb.ForceRequest{Breaker: name, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "acl drill"}); err != nil {
		t.Fatal(err)
	}
	if a, err := api.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w1"}); err != nil || a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN {
		t.Fatalf("Allow while forced open = %v, %v", a.GetDecision(), err)
	}
	daemontest.Eventually(t, "the hook delivery", func() bool { return delivered.Load() > 0 })
	daemontest.Eventually(t, "the savings flush", func() bool {
		sv, err := api.Savings(ctx, &pb.SavingsRequest{Breakers: []string{name}})
		return err == nil && sv.GetCallsAvoided() > 0
	})
	// A policy reload.
	writeFile(t, policyFile, policyText(2))
	daemontest.Eventually(t, "the policy reload", func() bool { return strings.Contains(logs.String(), "policy reloaded") })
	daemontest.Eventually(t, "the circuits gauge's List", func() bool {
		return scrape(t, c.MetricsListen, `breakerd_open_circuits`) > 0
	})
	if _, err := api.Force(ctx, &pb.ForceRequest{Breaker: name, Mode: pb.ForceMode_FORCE_MODE_AUTO, Reason: "acl drill"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "NOPERM") {
		t.Errorf("Redis refused the daemon's user (NOPERM in its log):\n%s", logs)
	}
	if denied := aclDenials(t, b, user); len(denied) > 0 {
		t.Errorf("Redis refused the daemon's user: %v", denied)
	}
}
