package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// result is one breakerctl run.
type result struct {
	stdout, stderr string
	code           int
}

// ctl runs breakerctl in-process with args and env (nothing else from the
// real environment) and returns what it printed and its exit code.
func ctl(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb daemontest.Buffer
	err := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errb)
	code := report(err, &errb)
	return result{out.String(), errb.String(), code}
}

// start runs a daemon on b without jitter, so cooldowns are exact.
func start(t *testing.T, b *testredis.Backend) *daemontest.Daemon {
	t.Helper()
	return daemontest.Start(t, b, store.Options{Rand: func() float64 { return 0 }})
}

// at returns the env that points breakerctl at d.
func at(d *daemontest.Daemon) map[string]string {
	return map[string]string{"BREAKERCTL_ADDR": d.Addr, "BREAKERCTL_OPERATOR": "alice"}
}

func (r result) ok(t *testing.T, args ...string) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("breakerctl %v: exit %d, stderr %q", args, r.code, r.stderr)
	}
	return r
}

func must(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	return ctl(t, env, args...).ok(t, args...)
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("output is not the JSON expected: %v\n%s", err, s)
	}
	return v
}

// trip opens name through the API: 4 timeouts from w1, one from w2.
func trip(t *testing.T, d *daemontest.Daemon, name string) {
	t.Helper()
	ctx := context.Background()
	for i, w := range []string{"w1", "w1", "w1", "w1", "w2"} {
		c, err := client.Dial(d.Addr, client.WithWorkerID(w))
		if err != nil {
			t.Fatal(err)
		}
		a, err := c.API().Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: w})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.API().Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: w, Ticket: a.Ticket,
			Outcome: pb.Outcome_OUTCOME_TIMEOUT, LatencyMs: 30000})
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if i == 4 && r.State.State != pb.State_STATE_OPEN {
			t.Fatalf("after 5 failures from 2 workers: %v, want OPEN", r.State.State)
		}
	}
}

func find(states []stateView, name string) *stateView {
	for i := range states {
		if states[i].Breaker == name {
			return &states[i]
		}
	}
	return nil
}

func TestListAndStatusShowATrippedBreaker(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b)
		env := at(d)
		name, quiet := b.Breaker("web_search"), b.Breaker("calendar")
		trip(t, d, name)
		if _, err := d.Store.Force(context.Background(), quiet, pb.ForceMode_FORCE_MODE_CLOSED, "pinned for the drill", 0, "bob"); err != nil {
			t.Fatal(err)
		}

		table := must(t, env, "list").stdout
		if !strings.HasPrefix(table, "BREAKER ") || !strings.Contains(table, "NEXT PROBE") {
			t.Errorf("list: no table header:\n%s", table)
		}
		var row string
		for _, l := range strings.Split(table, "\n") {
			if strings.HasPrefix(l, name+" ") {
				row = l
			}
		}
		if f := strings.Fields(row); len(f) < 9 || f[1] != "open" || f[3] != "5" || f[4] != "-" || f[5] != "2" || !strings.Contains(row, " now ") || !strings.Contains(row, "in 30s") {
			t.Errorf("list row of %s = %q, want open, 5 failures, 2 workers, opened now, next probe in 30s", name, row)
		}

		open := decode[[]stateView](t, must(t, env, "list", "--state", "open", "--json").stdout)
		got := find(open, name)
		if got == nil || got.State != "open" || got.Failures != 5 || got.DistinctWorkers != 2 ||
			got.NextProbeAtMs-got.OpenedAtMs != 30000 || !strings.Contains(got.Reason, "5 consecutive failures") {
			t.Fatalf("list --state open --json: %s = %+v, want open with 5 failures from 2 workers, probe 30s after opening", name, got)
		}
		if find(open, quiet) != nil {
			t.Errorf("list --state open lists the forced-closed %s", quiet)
		}
		forced := decode[[]stateView](t, must(t, env, "list", "--state", "forced", "--json").stdout)
		if find(forced, name) != nil || find(forced, quiet) == nil {
			t.Errorf("list --state forced: want %s and not %s, got %+v", quiet, name, forced)
		}

		st := must(t, env, "status", name).stdout
		for _, want := range []string{"state:", "open", "generation:", "failures:", "distinct workers:", "opened at:",
			"next probe at:", "(in 30s)", "last reason:", "5 consecutive failures from 2 workers", "last failure:",
			"timeout after 30s", "last event:", "closed -> open by w2"} {
			if !strings.Contains(st, want) {
				t.Errorf("status %s lacks %q:\n%s", name, want, st)
			}
		}
		js := decode[stateView](t, must(t, env, "status", name, "--json").stdout)
		if js.State != "open" || js.Generation != 1 || js.LastEvent == nil || js.LastEvent.To != "open" || js.LastEvent.Actor != "w2" {
			t.Errorf("status --json = %+v, want open at generation 1 with the trip as last event", js)
		}
		if n := d.Calls.Get("Allow") + d.Calls.Get("Force"); n != 5 {
			t.Errorf("breakerctl list/status made %d Allow or Force calls beyond the 5 Allows of the trip, want none", n-5)
		}
	})
}

func TestForceOpenForceCloseAutoAndEvents(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b)
		env := at(d)
		name := b.Breaker("stripe:acct_42")
		ctx := context.Background()

		out := must(t, env, "force-open", name, "--reason", "vendor maintenance", "--ttl", "10m").stdout
		if !strings.Contains(out, name+": forced_open by alice until ") || !strings.Contains(out, "(10m0s)") || !strings.Contains(out, "vendor maintenance") {
			t.Errorf("force-open printed %q", out)
		}
		st, err := d.Store.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != pb.State_STATE_FORCED_OPEN || st.ForcedBy != "alice" || st.ForcedUntilMs-st.AsOfMs != (10*time.Minute).Milliseconds() {
			t.Fatalf("after force-open: %v by %q until +%dms, want FORCED_OPEN by alice for 10m", st.State, st.ForcedBy, st.ForcedUntilMs-st.AsOfMs)
		}
		a, err := d.Store.Allow(ctx, name, "w1")
		if err != nil || a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN || !strings.HasSuffix(a.Reason, ": vendor maintenance") {
			t.Fatalf("Allow after force-open = %v %q (%v), want DENIED_FORCED_OPEN with the reason", a.GetDecision(), a.GetReason(), err)
		}

		js := decode[stateView](t, must(t, env, "force-close", name, "--reason", "INC-1234", "--operator", "carol", "--json").stdout)
		if js.State != "forced_closed" || js.ForcedBy != "carol" || js.ForcedUntilMs != 0 || js.Reason != "INC-1234" {
			t.Errorf("force-close --json = %+v, want forced_closed by carol until auto", js)
		}
		if out := must(t, env, "auto", name).stdout; !strings.Contains(out, name+": back to automatic operation, closed (generation 3)") {
			t.Errorf("auto printed %q", out)
		}
		if n := d.Calls.Get("Force"); n != 3 {
			t.Errorf("daemon served %d Force calls, want 3", n)
		}

		evs := decode[[]events.View](t, must(t, env, "events", "--breaker", name, "--json").stdout)
		type ev struct{ Kind, From, To, Actor string }
		var got []ev
		for _, e := range evs {
			got = append(got, ev{e.Kind, e.From, e.To, e.Actor})
		}
		want := []ev{{"forced", "closed", "forced_open", "alice"}, {"forced", "forced_open", "forced_closed", "carol"}, {"forced", "forced_closed", "closed", "alice"}}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Errorf("events --breaker --json = %+v, want %+v", got, want)
		}
		table := must(t, env, "events", "--since", "1h", "--limit", "10000").stdout
		if !strings.HasPrefix(table, "TIME ") || strings.Count(table, name) != 3 || !strings.Contains(table, "forced_open -> forced_closed") {
			t.Errorf("events --since 1h: want a table with the 3 forces of %s:\n%s", name, table)
		}
		if out := must(t, env, "events", "--breaker", b.Breaker("never_used")).stdout; out != "no events\n" {
			t.Errorf("events of an unused breaker printed %q, want \"no events\"", out)
		}
	})
}

func TestStatusOfAnUnknownBreakerExits3(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b)
		name := b.Breaker("web_serach")
		r := ctl(t, at(d), "status", name)
		if r.code != exitUnknown || r.stdout != "" || r.stderr != "breakerctl: unknown breaker \""+name+"\": no stored state and no event history\n" {
			t.Errorf("status of an unknown breaker: exit %d, stdout %q, stderr %q; want exit 3 and one line", r.code, r.stdout, r.stderr)
		}
		// One that recovered and went quiet keeps its history: known.
		known := b.Breaker("recovered")
		must(t, at(d), "auto", known)
		if r := ctl(t, at(d), "status", known); r.code != 0 || !strings.Contains(r.stdout, "closed") {
			t.Errorf("status of a breaker with history: exit %d, %q; want 0 and closed", r.code, r.stdout)
		}
	})
}

func TestUnreachableDaemonExits5(t *testing.T) {
	t.Parallel()
	addr := testredis.FreeAddr(t)
	for _, args := range [][]string{{"list"}, {"status", "x"}, {"force-open", "x", "--reason", "r"}, {"auto", "x"}, {"events"}, {"watch"}} {
		r := ctl(t, map[string]string{"BREAKERCTL_ADDR": addr}, args...)
		if r.code != exitUnreachable || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "breakerctl: cannot reach breakerd at "+addr) {
			t.Errorf("breakerctl %v with no daemon: exit %d, stderr %q; want exit 5 and one line naming the address", args, r.code, r.stderr)
		}
	}
	// --addr wins over the environment.
	r := ctl(t, map[string]string{"BREAKERCTL_ADDR": "127.0.0.1:1"}, "list", "--addr", addr)
	if r.code != exitUnreachable || !strings.Contains(r.stderr, addr) {
		t.Errorf("--addr %s with BREAKERCTL_ADDR set: stderr %q, want the flag's address", addr, r.stderr)
	}
}

func TestRedisDownExits5(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d := start(t, b)
	testredis.Stop(b.Mini)
	r := ctl(t, at(d), "list")
	if r.code != exitUnreachable || !strings.HasPrefix(r.stderr, "breakerctl: breakerd at "+d.Addr+" cannot reach Redis") {
		t.Errorf("list with Redis down: exit %d, stderr %q; want exit 5 saying breakerd cannot reach Redis", r.code, r.stderr)
	}
}

func TestUsageErrorsExit2AndReachNoOne(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d := start(t, b)
	for _, args := range [][]string{
		{"force-open", "x"},
		{"force-close", "x", "--reason", " "},
		{"force-open", "x", "--reason", "r", "--ttl", "-1m"},
		{"force-open", "--reason", "r"},
		{"status"},
		{"status", "a", "b"},
		{"list", "--state", "ajar"},
		{"list", "extra"},
		{"events", "--limit", "0"},
		{"events", "--since", "soon"},
		{"list", "--no-such-flag"},
		{"shadow", "x"},
		{"shadow", "x", "maybe"},
		{"shadow", "x", "on"},
		{"shadow", "x", "off", "--reason", " "},
		{"no-such-command"},
	} {
		r := ctl(t, at(d), args...)
		if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "breakerctl: ") {
			t.Errorf("breakerctl %v: exit %d, stderr %q; want exit 2 and one line", args, r.code, r.stderr)
		}
	}
	if n := d.Calls.Total(); n != 0 {
		t.Errorf("usage errors reached the daemon %d times, want 0", n)
	}
	// A bad value the daemon would refuse is a usage error too.
	plain := ctl(t, map[string]string{"BREAKERCTL_ADDR": "192.0.2.2:7070", "BREAKERCTL_TOKEN": "operator-secret"}, "list")
	if plain.code != exitUsage || !strings.Contains(plain.stderr, "refusing to send a bearer token over plaintext") {
		t.Errorf("a token to a remote plaintext address: exit %d, %q; want exit 2, refused", plain.code, plain.stderr)
	}
	if r := ctl(t, at(d), "status", "bad\tname"); r.code != exitUsage || !strings.Contains(r.stderr, "breaker: must be printable") {
		t.Errorf("status of a bad name: exit %d, stderr %q; want exit 2 naming the field", r.code, r.stderr)
	}
}

// gate is a fake breakerd that checks the bearer token as the daemon's
// auth is meant to: it records what each call carried.
type gate struct {
	pb.UnimplementedBreakerServiceServer
	mu   sync.Mutex
	auth []string
}

func (g *gate) List(ctx context.Context, _ *pb.ListRequest) (*pb.ListResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	g.mu.Lock()
	g.auth = append(g.auth, strings.Join(md.Get("authorization"), ","))
	g.mu.Unlock()
	switch strings.Join(md.Get("authorization"), ",") {
	case "":
		return nil, status.Error(codes.Unauthenticated, "authorization: bearer token required")
	case "Bearer operator-token":
		return &pb.ListResponse{}, nil
	}
	return nil, status.Error(codes.PermissionDenied, "role worker may not call List")
}

// Get never answers: a daemon that hangs.
func (g *gate) Get(ctx context.Context, _ *pb.GetRequest) (*pb.GetResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestTokenIsSentAsBearerMetadata(t *testing.T) {
	t.Parallel()
	g := &gate{}
	srv := grpc.NewServer()
	pb.RegisterBreakerServiceServer(srv, g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()
	for _, tc := range []struct {
		env  map[string]string
		args []string
		code int
		want string
	}{
		{map[string]string{"BREAKERCTL_TOKEN": "operator-token"}, nil, 0, "no breakers hold state"},
		{map[string]string{"BREAKERCTL_TOKEN": "worker-token"}, []string{"--token", "operator-token"}, 0, "no breakers hold state"},
		{nil, nil, exitDenied, "breakerctl: not authenticated by breakerd at " + addr + " (set --token or BREAKERCTL_TOKEN)"},
		{map[string]string{"BREAKERCTL_TOKEN": "worker-token"}, nil, exitDenied, "breakerctl: permission denied by breakerd at " + addr + ": role worker may not call List"},
	} {
		r := ctl(t, tc.env, append([]string{"list", "--addr", addr}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("list with env %v args %v: exit %d, out %q, err %q; want exit %d and %q", tc.env, tc.args, r.code, r.stdout, r.stderr, tc.code, tc.want)
		}
		if strings.Contains(r.stdout+r.stderr, "operator-token") || strings.Contains(r.stdout+r.stderr, "worker-token") {
			t.Errorf("breakerctl printed the token: %q %q", r.stdout, r.stderr)
		}
	}
	r := ctl(t, nil, "status", "x", "--addr", addr, "--timeout", "50ms")
	if r.code != exitUnreachable || !strings.HasPrefix(r.stderr, "breakerctl: breakerd at "+addr+" did not answer in time") {
		t.Errorf("status against a hung daemon: exit %d, stderr %q; want exit 5, not answering in time", r.code, r.stderr)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	want := []string{"Bearer operator-token", "Bearer operator-token", "", "Bearer worker-token"}
	if strings.Join(g.auth, "|") != strings.Join(want, "|") {
		t.Errorf("authorization metadata received = %q, want %q", g.auth, want)
	}
}

func TestWatchPrintsTransitionsLive(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d1 := start(t, b)
		d2 := start(t, b)
		name, other := b.Breaker("web_search"), b.Breaker("other")
		for _, jsonOut := range []bool{false, true} {
			ctx, cancel := context.WithCancel(context.Background())
			var out, errb daemontest.Buffer
			args := []string{"watch", "--addr", d1.Addr, "--breaker", name}
			if jsonOut {
				args = append(args, "--json")
			}
			done := make(chan error, 1)
			go func() { done <- run(ctx, args, func(string) string { return "" }, &out, &errb) }()
			waitFor(t, &errb, "watching "+name+" on "+d1.Addr)
			// Through the other daemon: watch is fleet-wide.
			if _, err := d2.Store.Force(context.Background(), other, pb.ForceMode_FORCE_MODE_OPEN, "not watched", 0, "ops"); err != nil {
				t.Fatal(err)
			}
			trip(t, d2, name)
			if jsonOut {
				waitFor(t, &out, `"to":"open"`)
				// The previous round's AUTO may still be in flight to the
				// hub: pick the trip's line.
				var line string
				for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
					decode[events.View](t, l) // one JSON object per line
					if strings.Contains(l, `"to":"open"`) {
						line = l
					}
				}
				e := decode[events.View](t, line)
				if e.Breaker != name || e.Kind != "transition" || e.From != "closed" || e.Actor != "w2" || e.CooldownMs != 30000 {
					t.Errorf("watch --json line = %+v, want the trip by w2", e)
				}
			} else {
				waitFor(t, &out, "transition  closed -> open  gen 1  by w2  cooldown 30s  ")
			}
			cancel()
			if code := report(<-done, &errb); code != 0 {
				t.Errorf("watch ended by interrupt: exit %d, stderr %q; want 0", code, errb.String())
			}
			if strings.Contains(out.String(), other) {
				t.Errorf("watch --breaker %s printed another breaker's event:\n%s", name, out.String())
			}
			if _, err := d2.Store.Force(context.Background(), name, pb.ForceMode_FORCE_MODE_AUTO, "", 0, "ops"); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// waitFor waits until w contains want: another goroutine's output, not
// a cooldown.
func waitFor(t *testing.T, w *daemontest.Buffer, want string) {
	t.Helper()
	held := false
	defer func() {
		if !held {
			t.Logf("got:\n%s", w)
		}
	}()
	daemontest.Eventually(t, fmt.Sprintf("printing %q", want), func() bool { return strings.Contains(w.String(), want) })
	held = true
}

func TestHelpOfEveryCommandIsComplete(t *testing.T) {
	t.Parallel()
	root := must(t, nil, "--help").stdout
	cmds := map[string][]string{
		"list":        {"--state", "half_open", "forced", "--json"},
		"status":      {"BREAKER", "unknown", "no stored state", "event history", "exits with status 3"},
		"force-open":  {"--reason", "--ttl", "--operator", "auto"},
		"force-close": {"--reason", "--ttl", "never trips"},
		"auto":        {"--reason", "fresh counts"},
		"shadow":      {"on|off|policy", "--reason", "would have opened", "always allows", "--operator"},
		"watch":       {"--breaker", "fleet-wide", "Ctrl-C"},
		"events":      {"--since", "--breaker", "--limit", "Redis clock"},
	}
	for _, want := range []string{"BREAKERCTL_ADDR", "BREAKERCTL_TOKEN", "authorization: Bearer", "Exit status", "--addr", "--token", "--json", "127.0.0.1:7070"} {
		if !strings.Contains(root, want) {
			t.Errorf("breakerctl --help lacks %q", want)
		}
	}
	for cmd, wants := range cmds {
		if !strings.Contains(root, "\n  "+cmd+" ") {
			t.Errorf("breakerctl --help does not list %s", cmd)
		}
		h := must(t, nil, cmd, "--help").stdout
		for _, want := range append(wants, "Usage:", "Examples:", "breakerctl "+cmd, "--addr") {
			if !strings.Contains(h, want) {
				t.Errorf("breakerctl %s --help lacks %q", cmd, want)
			}
		}
	}
}

func TestVersionNeedsNoDaemon(t *testing.T) {
	t.Parallel()
	out := must(t, nil, "--version").stdout
	if !strings.HasPrefix(out, "breakerctl ") || !strings.Contains(out, "(commit ") || !strings.Contains(out, "go1.") {
		t.Errorf("breakerctl --version = %q, want version, commit and Go version", out)
	}
}

func TestListReadsInPages(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b)
		env := at(d)
		var names []string
		for i := range 5 {
			name := b.Breaker(fmt.Sprintf("paged%d", i))
			names = append(names, name)
			if _, err := d.Store.Force(context.Background(), name, pb.ForceMode_FORCE_MODE_OPEN, "drill", 0, "bob"); err != nil {
				t.Fatal(err)
			}
		}
		got := decode[[]stateView](t, must(t, env, "list", "--page-size", "2", "--json").stdout)
		for _, name := range names {
			if find(got, name) == nil {
				t.Errorf("list --page-size 2 lacks %s", name)
			}
		}
		// (a real Redis is shared: count only this test's breakers)
		mine := 0
		for _, v := range got {
			if strings.HasPrefix(v.Breaker, b.Prefix) {
				mine++
			}
		}
		if mine != len(names) {
			t.Errorf("list --page-size 2 listed %d of this test's breakers, want %d, each once", mine, len(names))
		}
		// miniredis answers SCAN in one reply; Redis pages by the COUNT.
		if n := d.Calls.Get("List"); b.Mini == nil && n < 3 {
			t.Errorf("list --page-size 2 of 5 breakers made %d List calls, want one per page", n)
		}
		r := ctl(t, env, "list", "--page-size", "0")
		if r.code != 2 || !strings.Contains(r.stderr, "--page-size") {
			t.Errorf("list --page-size 0: exit %d, %q; want 2 naming --page-size", r.code, r.stderr)
		}
	})
}

func TestStatusShowsTheWindow(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		p := policy.Default()
		p.Mode, p.MinCalls = policy.ModeWindow, 4
		d := daemontest.Start(t, b, store.Options{Rand: func() float64 { return 0 }, Policies: policy.NewSet(p)})
		name := b.Breaker("vendor")
		ctx := context.Background()
		c, err := client.Dial(d.Addr, client.WithWorkerID("w1"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, o := range []pb.Outcome{pb.Outcome_OUTCOME_SUCCESS, pb.Outcome_OUTCOME_SUCCESS, pb.Outcome_OUTCOME_TIMEOUT} {
			a, err := c.API().Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w1"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.API().Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: a.Ticket, Outcome: o}); err != nil {
				t.Fatal(err)
			}
		}
		env := at(d)
		if st := must(t, env, "status", name).stdout; !strings.Contains(st, "window:") || !strings.Contains(st, "3 calls, 1 failed (33%)") {
			t.Errorf("status %s lacks the window's 3 calls, 1 failure:\n%s", name, st)
		}
		if js := decode[stateView](t, must(t, env, "status", name, "--json").stdout); js.WindowCalls != 3 || js.WindowFailures != 1 {
			t.Errorf("status --json window = %d calls %d failures, want 3 and 1", js.WindowCalls, js.WindowFailures)
		}
		if ls := must(t, env, "list").stdout; !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+closed\s+0\s+1/3 in window\s+-\s`).MatchString(ls) {
			t.Errorf("list lacks %s's window (1/3 in window, no slow calls):\n%s", name, ls)
		}
		if js := decode[[]stateView](t, must(t, env, "list", "--json").stdout); !slices.ContainsFunc(js, func(v stateView) bool {
			return v.Breaker == name && v.WindowMode && v.WindowCalls == 3
		}) {
			t.Errorf("list --json lacks %s with window_mode and its 3 calls: %+v", name, js)
		}
		// w2 fails too: 2 of 4 calls from 2 workers trips it, and the
		// window starts empty; list shows the 2 failures that tripped it,
		// not "0/0 in window".
		w2, err := client.Dial(d.Addr, client.WithWorkerID("w2"))
		if err != nil {
			t.Fatal(err)
		}
		defer w2.Close()
		a, err := w2.API().Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w2"})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := w2.API().Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w2", Ticket: a.Ticket, Outcome: pb.Outcome_OUTCOME_TIMEOUT}); err != nil || res.GetState().GetState() != pb.State_STATE_OPEN {
			t.Fatalf("w2's failure: %v, %v; want the window to trip", res, err)
		}
		if ls := must(t, env, "list").stdout; !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+open\s+1\s+2\s+-\s+2\s`).MatchString(ls) {
			t.Errorf("list of the tripped window breaker lacks its 2 failures from 2 workers:\n%s", ls)
		}
	})
}

func TestStatusShowsTheSlowRun(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		p := policy.Default()
		p.SlowCall, p.SlowCallThreshold = 2*time.Second, 5
		d := daemontest.Start(t, b, store.Options{Rand: func() float64 { return 0 }, Policies: policy.NewSet(p)})
		name := b.Breaker("vendor")
		ctx := context.Background()
		c, err := client.Dial(d.Addr, client.WithWorkerID("w1"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, ms := range []int64{25000, 2000, 25000} { // slow, fast (exactly at the limit), slow
			a, err := c.API().Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w1"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.API().Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: a.Ticket,
				Outcome: pb.Outcome_OUTCOME_SUCCESS, LatencyMs: ms}); err != nil {
				t.Fatal(err)
			}
		}
		env := at(d)
		if st := must(t, env, "status", name).stdout; !strings.Contains(st, "slow calls:") || !strings.Contains(st, "1 slower than 2s") {
			t.Errorf("status %s lacks the slow run of 1:\n%s", name, st)
		}
		if js := decode[stateView](t, must(t, env, "status", name, "--json").stdout); js.SlowCalls != 1 || js.SlowCallMs != 2000 {
			t.Errorf("status --json = %d slow calls, slow_call_ms %d; want 1 and 2000", js.SlowCalls, js.SlowCallMs)
		}
		if ls := must(t, env, "list").stdout; !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+closed\s+0\s+0\s+1 over 2s\s`).MatchString(ls) {
			t.Errorf("list lacks %s's slow run (1 over 2s):\n%s", name, ls)
		}
		// Open, the run is not what matters (a slow trip showed "0 slower
		// than" beside the reason): the line goes.
		if _, err := c.API().Force(ctx, &pb.ForceRequest{Breaker: name, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "maintenance"}); err != nil {
			t.Fatal(err)
		}
		if st := must(t, env, "status", name).stdout; strings.Contains(st, "slow calls:") {
			t.Errorf("status of a forced-open breaker shows the slow run:\n%s", st)
		}
		if ls := must(t, env, "list").stdout; !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+forced_open\s+\d+\s+\d+\s+-\s`).MatchString(ls) {
			t.Errorf("list of a forced-open breaker shows a slow run:\n%s", ls)
		}
	})
}

func TestStatusShowsTheOpenFractionCap(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		p := policy.Default()
		p.Threshold, p.MinWorkers = 1, 1
		first, second := b.Breaker("g:a"), b.Breaker("g:b")
		g := policy.Group{Name: b.Prefix + "grp", Members: []string{first, second}, MaxOpenFraction: 0.5}
		known, open := store.GroupKeys(g.Name)
		t.Cleanup(func() { _ = b.Client.Del(context.Background(), known, open).Err() })
		d := daemontest.Start(t, b, store.Options{Rand: func() float64 { return 0 }, Policies: policy.NewSet(p).WithGroups(g)})
		ctx := context.Background()
		c, err := client.Dial(d.Addr, client.WithWorkerID("w1"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fail := func(name string) {
			a, err := c.API().Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w1"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.API().Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: a.Ticket,
				Outcome: pb.Outcome_OUTCOME_TIMEOUT}); err != nil {
				t.Fatal(err)
			}
		}
		fail(first)  // the first trip in the group: open
		fail(second) // 2 of 2 would be open, more than half: capped
		env := at(d)
		st := must(t, env, "status", second).stdout
		if !strings.Contains(st, "group:") || !strings.Contains(st, g.Name+": 1 of 2 members open, 2 holding state (max_open_fraction 0.5)") ||
			!strings.Contains(st, "open-fraction cap:") || !strings.Contains(st, "open_fraction_cap") {
			t.Errorf("status %s lacks the group's counts, the cap or its event:\n%s", second, st)
		}
		js := decode[stateView](t, must(t, env, "status", second, "--json").stdout)
		if js.State != "closed" || !js.OpenFractionCapped || js.Group != g.Name || js.GroupMembers != 2 || js.GroupKnown != 2 || js.GroupOpen != 1 || js.MaxOpenFraction != 0.5 {
			t.Errorf("status --json = %+v, want closed, capped, group %s with 2 members, 2 known, 1 open", js, g.Name)
		}
		if ls := must(t, env, "list").stdout; !strings.Contains(ls, "trip stopped by the open-fraction cap of group "+g.Name) {
			t.Errorf("list lacks the capped breaker's reason:\n%s", ls)
		}
		if st := must(t, env, "status", first).stdout; strings.Contains(st, "open-fraction cap:") {
			t.Errorf("status of the open breaker shows the cap:\n%s", st)
		}
	})
}

// TestShadowCommandAndShadowState: breakerctl shadow sets a breaker's
// shadow mode; list, status and events show the state enforced with the
// shadow state beside it, and the shadow transitions marked.
func TestShadowCommandAndShadowState(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b)
		env := at(d)
		name := b.Breaker("vendor")
		out := must(t, env, "shadow", name, "on", "--reason", "tuning threshold").stdout
		if !strings.Contains(out, name+": shadow on: shadowed (Allow always allows), closed (shadow: closed) (generation 1)") {
			t.Errorf("shadow on printed %q", out)
		}
		ctx := context.Background()
		for _, w := range []string{"w1", "w1", "w1", "w1", "w2"} {
			a, err := d.Store.Allow(ctx, name, w)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Store.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: w, Ticket: a.Ticket, Outcome: pb.Outcome_OUTCOME_TIMEOUT}); err != nil {
				t.Fatal(err)
			}
		}
		st := must(t, env, "status", name).stdout
		for _, want := range []string{"closed (shadow: open)", "shadow:", "on (set by an operator; breakerctl shadow " + name + " policy returns it to its policy)",
			"shadow mode, not enforced: would be open: ", "transition (shadow) closed -> open"} {
			if !strings.Contains(st, want) {
				t.Errorf("status lacks %q:\n%s", want, st)
			}
		}
		js := decode[stateView](t, must(t, env, "status", name, "--json").stdout)
		if js.State != "closed" || !js.Shadow || js.ShadowState != "open" || js.ShadowSetting != "on" || js.LastEvent == nil || !js.LastEvent.Shadow {
			t.Errorf("status --json = %+v, want closed, shadow, open, setting on, last event marked", js)
		}
		if ls := must(t, env, "list").stdout; !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+closed \(shadow: open\)\s+2\s`).MatchString(ls) {
			t.Errorf("list lacks %s closed (shadow: open):\n%s", name, ls)
		}
		out = must(t, env, "shadow", name, "off", "--reason", "enforce now").stdout
		if !strings.Contains(out, name+": shadow off: enforced, open (generation 3)") {
			t.Errorf("shadow off printed %q", out)
		}
		evs := decode[[]events.View](t, must(t, env, "events", "--breaker", name, "--json").stdout)
		if len(evs) != 3 || evs[0].Kind != "forced" || !evs[0].Shadow || evs[0].Actor != "alice" || !evs[1].Shadow || evs[1].To != "open" || evs[2].Shadow {
			t.Errorf("events = %+v, want shadow on (marked), the shadow trip (marked), shadow off (not marked)", evs)
		}
		if n := d.Calls.Get("Force"); n != 2 {
			t.Errorf("daemon served %d Force calls, want 2", n)
		}
	})
}

func TestSavingsShowsWhatABreakerSaved(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d := start(t, b)
	name := b.Breaker("paid")
	trip(t, d, name)
	c, err := client.Dial(d.Addr, client.WithWorkerID("w1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for range 3 {
		if a, err := c.API().Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w1"}); err != nil || a.Decision == pb.Decision_DECISION_ALLOWED {
			t.Fatalf("Allow on the open breaker = %v, %v; want a denial", a.GetDecision(), err)
		}
	}
	if _, err := c.API().ReportSavings(ctx, &pb.ReportSavingsRequest{WorkerId: "w1", Reports: []*pb.SavingsReport{{Breaker: name, LocalDenials: 4, ToolsRemoved: 1}}}); err != nil {
		t.Fatal(err)
	}
	out := must(t, at(d), "savings", "--window", "2h", "--breaker", name).stdout
	if !strings.Contains(out, "savings over 2h0m0s") || !regexp.MustCompile(regexp.QuoteMeta(name)+`\s+3\s+4\s+1\s+8\s+-`).MatchString(out) {
		t.Errorf("breakerctl savings:\n%s\nwant a row of 3 daemon, 4 client denials, 1 tool removed, 8 calls avoided", out)
	}
	js := decode[struct {
		CallsAvoided int64 `json:"calls_avoided"`
	}](t, must(t, at(d), "savings", "--json", "--breaker", name).stdout)
	if js.CallsAvoided != 8 {
		t.Errorf("savings --json calls_avoided = %d, want 8", js.CallsAvoided)
	}
	if r := ctl(t, at(d), "savings", "--window", "30s"); r.code != 2 || !strings.Contains(r.stderr, "--window") {
		t.Errorf("savings --window 30s: exit %d, %q; want a usage error naming --window", r.code, r.stderr)
	}
}
