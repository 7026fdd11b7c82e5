package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

const goodPolicy = "defaults:\n  threshold: 5\n"

func TestPolicyReloadRejectsABadFileAndKeepsTheOldOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, goodPolicy)
	set, sum, err := readPolicy(path)
	if err != nil {
		t.Fatal(err)
	}
	inForce := set
	var results []error
	var logs daemontest.Buffer
	r := newPolicyReloader(path, sum, slog.New(slog.NewTextHandler(&logs, nil)), func(s *policy.Set) { inForce = s }, func(err error) { results = append(results, err) })

	// An unchanged file is not reloaded on a poll.
	if err := r.reload(false, "file changed"); err != nil || inForce != set || len(results) != 0 {
		t.Fatalf("poll of an unchanged file: err %v, applied %v, results %v; want nothing done", err, inForce != set, results)
	}

	writeFile(t, path, "defaults:\n  threshold: 0\n")
	err = r.reload(false, "file changed")
	if err == nil || !strings.Contains(err.Error(), "defaults.threshold: must be at least 1") {
		t.Fatalf("reload of a bad file: err %v, want one naming defaults.threshold", err)
	}
	if inForce != set || inForce.Defaults().Threshold != 5 {
		t.Fatalf("a rejected file replaced the policy in force")
	}
	if n := strings.Count(logs.String(), "policy reload rejected"); n != 1 || !strings.Contains(logs.String(), "defaults.threshold") {
		t.Errorf("logs after a rejected file:\n%s\nwant one rejection naming the field", logs.String())
	}
	// Polling the same bad content again neither applies nor re-logs it;
	// a SIGHUP retries it (and logs again).
	_ = r.reload(false, "file changed")
	if n := strings.Count(logs.String(), "policy reload rejected"); n != 1 {
		t.Errorf("the same bad file was logged %d times on polls, want once", n)
	}
	if err := r.reload(true, "SIGHUP"); err == nil || strings.Count(logs.String(), "policy reload rejected") != 2 {
		t.Errorf("SIGHUP on a bad file: err %v; want it rejected and logged again", err)
	}

	writeFile(t, path, "defaults:\n  threshold: 2\n  min_workers: 1\n")
	if err := r.reload(false, "file changed"); err != nil {
		t.Fatalf("reload of a good file: %v", err)
	}
	if got := inForce.Defaults(); got.Threshold != 2 || got.MinWorkers != 1 {
		t.Errorf("after reload: threshold %d min_workers %d, want 2 and 1", got.Threshold, got.MinWorkers)
	}
	if !strings.Contains(logs.String(), "policy reloaded") {
		t.Errorf("no log of the reload:\n%s", logs.String())
	}

	// A file that disappears keeps the policy and is logged once.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	before := inForce
	_ = r.reload(false, "file changed")
	_ = r.reload(false, "file changed")
	if inForce != before || strings.Count(logs.String(), "no such file") != 1 {
		t.Errorf("missing file: policy replaced %v, logged %d times; want kept and logged once",
			inForce != before, strings.Count(logs.String(), "no such file"))
	}
	if len(results) != 4 || results[0] == nil || results[1] == nil || results[2] != nil || results[3] == nil {
		t.Errorf("results reported = %v, want [rejected, rejected (SIGHUP), applied, rejected (missing)]", results)
	}
}

func TestPolicyReloadRunsOnTickAndSIGHUPChannels(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, goodPolicy)
	_, sum, err := readPolicy(path)
	if err != nil {
		t.Fatal(err)
	}
	applied := make(chan *policy.Set, 4)
	r := newPolicyReloader(path, sum, slog.New(slog.NewTextHandler(io.Discard, nil)), func(s *policy.Set) { applied <- s }, func(error) {})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hup, tick := make(chan os.Signal), make(chan time.Time)
	done := make(chan struct{})
	go func() { runReloaders(ctx, []*fileReloader{r}, hup, tick); close(done) }()

	tick <- time.Now() // unchanged: nothing
	hup <- nil         // forced: applied even though unchanged
	if s := <-applied; s.Defaults().Threshold != 5 {
		t.Errorf("SIGHUP applied threshold %d, want 5", s.Defaults().Threshold)
	}
	writeFile(t, path, "defaults:\n  threshold: 9\n")
	tick <- time.Now()
	if s := <-applied; s.Defaults().Threshold != 9 {
		t.Errorf("a changed file applied threshold %d, want 9", s.Defaults().Threshold)
	}
	cancel()
	<-done
	if len(applied) != 0 {
		t.Errorf("%d more reloads than asked for", len(applied))
	}
}

func TestReloadedPolicyDecidesTheNextCall(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.Start(t, b, store.Options{Rand: func() float64 { return 0 }})
		path := filepath.Join(t.TempDir(), "policy.yaml")
		writeFile(t, path, goodPolicy)
		set, sum, err := readPolicy(path)
		if err != nil {
			t.Fatal(err)
		}
		d.Store.SetPolicies(set)
		r := newPolicyReloader(path, sum, slog.New(slog.NewTextHandler(io.Discard, nil)), d.Store.SetPolicies, func(error) {})
		c, err := client.Dial(d.Addr, client.WithWorkerID("w1"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		name := b.Breaker("web_search")
		fail := func() *pb.BreakerState {
			t.Helper()
			ctx := context.Background()
			a, err := c.API().Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w1"})
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.API().Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: a.Ticket, Outcome: pb.Outcome_OUTCOME_SERVER_ERROR})
			if err != nil {
				t.Fatal(err)
			}
			return res.State
		}

		// A bad file (a one-worker quorum of 0) is rejected: the old policy
		// keeps deciding, and one worker alone still cannot trip.
		writeFile(t, path, "defaults:\n  threshold: 1\n  min_workers: 0\n")
		if err := r.reload(true, "SIGHUP"); err == nil {
			t.Fatal("a file with min_workers 0 was accepted")
		}
		if st := fail(); st.State != pb.State_STATE_CLOSED || st.Failures != 1 {
			t.Fatalf("after a rejected reload, one failure: %v with %d failures; want CLOSED with 1 (old policy)", st.State, st.Failures)
		}
		writeFile(t, path, "defaults:\n  threshold: 2\n  min_workers: 1\n  cooldown_base: 7s\n")
		if err := r.reload(false, "file changed"); err != nil {
			t.Fatal(err)
		}
		if st := fail(); st.State != pb.State_STATE_OPEN || st.CooldownMs != 7000 {
			t.Errorf("after reloading threshold 2, min_workers 1: second failure gave %v cooldown %dms; want OPEN for 7s", st.State, st.CooldownMs)
		}
	})
}

// scrape returns the value of one series ("name{labels}" exactly as the
// text format writes it), or -1 when it is absent.
func scrape(t *testing.T, addr, series string) float64 {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	return -1
}

// eventually polls a scrape until it reads want: the hub hears events
// asynchronously, over Redis pub/sub. With atLeast, any value from want
// up will do (on a Redis shared with other tests, whose daemons may
// publish on the same channel).
func eventually(t *testing.T, addr, series string, want float64, atLeast ...bool) {
	t.Helper()
	daemontest.Eventually(t, fmt.Sprintf("%s on %s reading %v", series, addr, want), func() bool {
		got := scrape(t, addr, series)
		return got == want || (len(atLeast) > 0 && atLeast[0] && got >= want)
	})
}

type running struct {
	grpc, metrics, http string
	logs                *daemontest.Buffer
}

// runDaemon runs the real assembly (Run) on b until t ends.
func runDaemon(t *testing.T, b *testredis.Backend) running {
	t.Helper()
	u, cluster := b.URL()
	c := Config{Listen: "127.0.0.1:0", RedisURL: u, RedisCluster: cluster, MetricsListen: testredis.FreeAddr(t), CircuitsInterval: 100 * time.Millisecond,
		HTTPListen: testredis.FreeAddr(t), MaxBreakerSeries: 1 << 20, // a shared Redis may hold many open breakers
		EventsMaxLen: 1000, EventRetention: time.Hour, ShutdownTimeout: time.Second, HealthInterval: daemontest.HealthInterval,
		LogFormat: "json"}
	logs := &daemontest.Buffer{}
	addr := startRun(t, c, NewLogger(c, logs), logs)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the daemon at %s logged:\n%s", addr, logs.String())
		}
	})
	return running{grpc: addr, metrics: c.MetricsListen, http: c.HTTPListen, logs: logs}
}

func TestMetricsAndLogsAfterAScriptedTrip(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d1, d2 := runDaemon(t, b), runDaemon(t, b)
		name := b.Breaker("web_search")
		ctx := context.Background()
		call := func(worker string, outcome pb.Outcome) {
			t.Helper()
			c, err := client.Dial(d1.grpc, client.WithWorkerID(worker))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			a, err := c.API().Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: worker})
			if err != nil {
				t.Fatal(err)
			}
			if outcome == 0 {
				return
			}
			if _, err := c.API().Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: worker, Ticket: a.Ticket, Outcome: outcome}); err != nil {
				t.Fatal(err)
			}
		}
		// The script: 4 timeouts from w1, one 404 (never counted), one
		// timeout from w2 (the trip), one Allow denied, one bad request.
		for range 4 {
			call("w1", pb.Outcome_OUTCOME_TIMEOUT)
		}
		call("w1", pb.Outcome_OUTCOME_NOT_FOUND)
		call("w2", pb.Outcome_OUTCOME_TIMEOUT)
		call("w3", 0)
		c, err := client.Dial(d1.grpc)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.API().Allow(ctx, &pb.AllowRequest{Breaker: "", WorkerId: "w"}); err == nil {
			t.Fatal("Allow with no breaker succeeded")
		}

		// Counters of what d1 served; fleet-wide views on both daemons.
		for series, want := range map[string]float64{
			`breakerd_decisions_total{decision="allowed"}`:                     6,
			`breakerd_decisions_total{decision="denied_open"}`:                 1,
			`breakerd_decisions_total{decision="probe"}`:                       0,
			`breakerd_records_total{counted="true",outcome="timeout"}`:         5,
			`breakerd_records_total{counted="false",outcome="not_found"}`:      1,
			`breakerd_rpc_errors_total{code="InvalidArgument",method="Allow"}`: 1,
			`breakerd_redis_script_duration_seconds_count{script="allow"}`:     7,
			`breakerd_redis_script_duration_seconds_count{script="record"}`:    6,
			`breakerd_degraded`:                      0,
			`breakerd_config_last_reload_successful`: 1,
		} {
			if got := scrape(t, d1.metrics, series); got != want {
				t.Errorf("d1 %s = %v, want %v", series, got, want)
			}
		}
		if got := scrape(t, d2.metrics, `breakerd_decisions_total{decision="allowed"}`); got != 0 {
			t.Errorf("d2 counted %v decisions it never served", got)
		}
		// The live heap, which the soak's flatness rule reads (0 until
		// the first collection).
		runtime.GC()
		if got := scrape(t, d1.metrics, "go_gc_heap_live_bytes"); got <= 0 {
			t.Errorf("go_gc_heap_live_bytes = %v after a collection, want the live heap", got)
		}
		for _, d := range []running{d1, d2} {
			shared := b.Mini == nil
			eventually(t, d.metrics, `breakerd_transitions_total{cause="trip",from="closed",to="open"}`, 1, shared)
			eventually(t, d.metrics, `breakerd_events_total{kind="transition"}`, 1, shared)
			// The circuit gauges follow the background listing (every 100ms
			// here). miniredis holds only this test's breakers; the real
			// Redis is shared with other tests, so there the count is at
			// least ours.
			eventually(t, d.metrics, `breakerd_open_circuits`, 1, shared)
			eventually(t, d.metrics, `breakerd_circuits{state="open"}`, 1, shared)
			// The tripped breaker has series of its own, on every replica,
			// with its policy's cooldown cap (the default 15m).
			eventually(t, d.metrics, `breakerd_breaker_state{breaker="`+name+`",state="open"}`, 1)
			eventually(t, d.metrics, `breakerd_breaker_cooldown_cap_seconds{breaker="`+name+`"}`, 900)
			// Waited on too: a List that outlasts its timeout on a busy
			// machine leaves the circuit series absent until the next one.
			eventually(t, d.metrics, `breakerd_breaker_open_since_timestamp_seconds{breaker="`+name+`"}`, 1, true)
		}
		// RPC latency by method, code and protocol: d1 answered 7 Allows
		// (6 allowed, 1 denied: a denial is data, code OK) and refused one
		// over gRPC; one Allow over HTTP/JSON is told apart.
		res, err := http.Post("http://"+d1.http+"/breakerd.v1.BreakerService/Allow", "application/json",
			strings.NewReader(`{"breaker":"`+name+`","worker_id":"w4"}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("Allow over HTTP: %s", res.Status)
		}
		for series, want := range map[string]float64{
			`breakerd_rpc_duration_seconds_count{code="OK",method="Allow",protocol="grpc"}`:              7,
			`breakerd_rpc_duration_seconds_count{code="InvalidArgument",method="Allow",protocol="grpc"}`: 1,
			`breakerd_rpc_duration_seconds_count{code="OK",method="Record",protocol="grpc"}`:             6,
			`breakerd_rpc_duration_seconds_count{code="OK",method="Allow",protocol="http"}`:              1,
		} {
			if got := scrape(t, d1.metrics, series); got != want {
				t.Errorf("d1 %s = %v, want %v", series, got, want)
			}
		}

		// Every transition is logged with breaker, worker, generation, reason
		// and cooldown; on both daemons, which both heard it.
		for _, d := range []running{d1, d2} {
			var found bool
			for _, l := range strings.Split(d.logs.String(), "\n") {
				var rec map[string]any
				if json.Unmarshal([]byte(l), &rec) != nil || rec["breaker"] != name || rec["msg"] != "breaker open" {
					continue
				}
				found = rec["worker"] == "w2" && rec["generation"] == float64(1) && rec["from"] == "closed" &&
					strings.Contains(fmt.Sprint(rec["reason"]), "5 consecutive failures") && rec["cooldown"] != nil && rec["event_id"] != ""
				if !found {
					t.Errorf("transition log line lacks a field: %s", l)
				}
			}
			if !found {
				t.Errorf("no log of the trip:\n%s", d.logs.String())
			}
		}

		// A force is logged once, by the daemon that served it.
		if _, err := c.API().Force(ctx, &pb.ForceRequest{Breaker: name, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "INC-7", TtlMs: 60000, Operator: "alice"}); err != nil {
			t.Fatal(err)
		}
		eventually(t, d2.metrics, `breakerd_transitions_total{cause="forced",from="open",to="forced_open"}`, 1, b.Mini == nil)
		eventually(t, d2.metrics, `breakerd_breaker_state{breaker="`+name+`",state="forced_open"}`, 1)
		if got := scrape(t, d2.metrics, `breakerd_breaker_state{breaker="`+name+`",state="open"}`); got != -1 {
			t.Errorf("a forced breaker still has its open series: %v", got)
		}
		for i, d := range []running{d1, d2} {
			n := strings.Count(d.logs.String(), `"msg":"force"`)
			if want := 1 - i; n != want {
				t.Errorf("daemon %d logged %d forces, want %d", i+1, n, want)
			}
		}
		if l := d1.logs.String(); !strings.Contains(l, `"operator":"alice","reason":"INC-7","ttl":"1m0s"`) || !strings.Contains(l, `"state":"forced_open","generation":2`) {
			t.Errorf("force log lacks operator, reason, ttl, state or generation:\n%s", l)
		}

		if b.Mini == nil {
			return
		}
		// Redis gone: degraded.
		testredis.Stop(b.Mini)
		eventually(t, d1.metrics, `breakerd_degraded`, 1)
	})
}

func TestOperateFlagsAndEnvironment(t *testing.T) {
	env := map[string]string{"BREAKERD_METRICS_LISTEN": "0.0.0.0:9464", "BREAKERD_CONFIG_POLL": "2s"}
	c, err := ParseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil || c.MetricsListen != "0.0.0.0:9464" || c.ConfigPoll != 2*time.Second {
		t.Errorf("from env: %q %s (%v), want 0.0.0.0:9464 and 2s", c.MetricsListen, c.ConfigPoll, err)
	}
	c, err = ParseConfig([]string{"--metrics-listen", "127.0.0.1:1", "--config-poll", "0"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil || c.MetricsListen != "127.0.0.1:1" || c.ConfigPoll != 0 {
		t.Errorf("flags over env: %q %s (%v), want the flags'", c.MetricsListen, c.ConfigPoll, err)
	}
	c, err = ParseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil || c.MetricsListen != "" || c.ConfigPoll != 5*time.Second {
		t.Errorf("defaults: %q %s (%v), want no metrics listener and a 5s poll", c.MetricsListen, c.ConfigPoll, err)
	}
	if _, err := ParseConfig([]string{"--config-poll", "-1s"}, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "--config-poll") {
		t.Errorf("negative poll: %v, want an error naming --config-poll", err)
	}
}

// A bad group is rejected on reload with its field named,
// and the groups in force stay.
func TestPolicyReloadRejectsABadGroupAndKeepsTheOldGroups(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, "groups:\n  - {name: search, members: [\"search:web\"], max_open_fraction: 0.5}\n")
	set, sum, err := readPolicy(path)
	if err != nil {
		t.Fatal(err)
	}
	inForce := set
	var logs daemontest.Buffer
	r := newPolicyReloader(path, sum, slog.New(slog.NewTextHandler(&logs, nil)), func(s *policy.Set) { inForce = s }, func(error) {})
	writeFile(t, path, "groups:\n  - {name: search, members: [\"search:web\"], max_open_fraction: 1.5}\n")
	err = r.reload(false, "file changed")
	if err == nil || !strings.Contains(err.Error(), "groups[0].max_open_fraction: must be in (0, 1]") {
		t.Fatalf("reload of a bad group: err %v, want one naming groups[0].max_open_fraction", err)
	}
	if g, ok := inForce.GroupOf("search:web"); inForce != set || !ok || g.MaxOpenFraction != 0.5 {
		t.Fatalf("a rejected file replaced the groups in force: %+v %v", g, ok)
	}
}
