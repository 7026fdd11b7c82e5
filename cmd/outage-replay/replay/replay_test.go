package replay

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// smallReplay is the incident with 40 runs. The in-process daemon runs on
// the replay's virtual clock, so the result does not depend on how busy
// the machine is, and it takes a few seconds of wall time.
func smallReplay() Config {
	cfg := Default()
	cfg.Runs = 40
	return cfg
}

func TestReplaySmall(t *testing.T) {
	cfg := smallReplay()
	rep, err := Replay(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	var out bytes.Buffer
	if err := rep.Print(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	for _, w := range rep.Warnings {
		t.Errorf("warning %q", w)
	}
	if rep.Lag != 0 {
		t.Errorf("lag %s on the virtual clock, want 0: no run is ever late", rep.Lag)
	}
	if len(rep.Rows) != 5 {
		t.Fatalf("%d rows, want 5", len(rep.Rows))
	}
	row := func(arm int) Row { return rep.Rows[arm-1] }

	t.Run("the vendor is the witness", func(t *testing.T) {
		for _, r := range rep.Rows {
			if r.Runs != cfg.Runs {
				t.Errorf("arm %d: %d runs finished, want %d", r.Arm, r.Runs, cfg.Runs)
			}
			// Every call the model's tool made reached the vendor, and
			// nothing else did.
			if r.Calls != r.ToolCalls {
				t.Errorf("arm %d: the vendor saw %d calls, the model's tool made %d", r.Arm, r.Calls, r.ToolCalls)
			}
			if r.Attempts < r.Calls || r.Attempts > r.Calls*cfg.Attempts {
				t.Errorf("arm %d: %d attempts for %d calls of at most %d attempts", r.Arm, r.Attempts, r.Calls, cfg.Attempts)
			}
			if r.Results != r.Served {
				t.Errorf("arm %d: %d runs got results, the vendor served %d", r.Arm, r.Results, r.Served)
			}
			if r.Admitted != r.Lacked || r.FalseAdmits != 0 {
				t.Errorf("arm %d: %d of %d runs without results admitted it, %d with results claimed otherwise",
					r.Arm, r.Admitted, r.Lacked, r.FalseAdmits)
			}
		}
	})

	t.Run("breakerd is the witness", func(t *testing.T) {
		for _, arm := range []int{ArmFleetRemove, ArmFleetFailFast} {
			r, rec := row(arm), row(arm).Recovery
			w := r.Wire
			// What the daemon served is what the clients sent, and every
			// RPC was answered by breakerd, none by a client's fallback.
			if w.Allow != r.ClientWire.Allow || w.Record != r.ClientWire.Record || w.BatchGet != r.ClientWire.BatchGet {
				t.Errorf("arm %d: daemon served Allow/Record/BatchGet %d/%d/%d, clients sent %d/%d/%d", arm,
					w.Allow, w.Record, w.BatchGet, r.ClientWire.Allow, r.ClientWire.Record, r.ClientWire.BatchGet)
			}
			if w.Errors+r.ClientWire.Errors != 0 {
				t.Errorf("arm %d: %d RPCs failed at the daemon, %d at the clients", arm, w.Errors, r.ClientWire.Errors)
			}
			// Every call the model made asked breakerd; every call let
			// out was recorded, and is a call the vendor saw.
			made, refused := r.ToolCalls+rec.TailToolCalls, r.Denials+rec.TailDenials
			if w.Allow != made+refused {
				t.Errorf("arm %d: breakerd answered %d Allows, the models made %d calls and had %d refused", arm, w.Allow, made, refused)
			}
			let := w.Decisions[pb.Decision_DECISION_ALLOWED] + w.Decisions[pb.Decision_DECISION_PROBE]
			if w.Record != made || let != made || r.Calls+rec.TailCalls != made {
				t.Errorf("arm %d: breakerd let %d calls out and got %d Records; the models made %d; the vendor saw %d",
					arm, let, w.Record, made, r.Calls+rec.TailCalls)
			}
			if w.Trip == nil || w.Trip.GetDistinctWorkers() < int64(cfg.Quorum) {
				t.Errorf("arm %d: trip %v, want an open from at least %d workers", arm, w.Trip, cfg.Quorum)
			}
			if !rec.Closed || rec.After <= 0 || rec.TailRuns == 0 {
				t.Errorf("arm %d: recovery %+v, want a successful probe after the vendor recovered", arm, *rec)
			}
			if r.Probes < 2 {
				t.Errorf("arm %d: %d probes, want a failed one during the outage and the successful one after", arm, r.Probes)
			}
		}
		if n := row(ArmFleetRemove).Wire.BatchGet; n == 0 {
			t.Errorf("arm 4: no BatchGet reached breakerd; Run.Available did not ask")
		}
		if n := row(ArmFleetFailFast).Wire.BatchGet; n != 0 {
			t.Errorf("arm 5: %d BatchGets; its toolset must be untouched", n)
		}
	})

	t.Run("the no-breaker run is the incident's run", func(t *testing.T) {
		// A run that never got results made a call at every step from 4
		// to 14 and used its 20 steps: 6.8 minutes and $1.20.
		failed := 0
		for _, o := range row(ArmNoBreaker).runs {
			if o.results {
				continue
			}
			failed++
			if o.toolCalls != 11 || o.steps != 20 {
				t.Errorf("run %d: %d calls and %d steps without results, want 11 and 20", o.id, o.toolCalls, o.steps)
			}
			if o.wall != 408*time.Second {
				t.Errorf("run %d: %s without results, want 6m48s", o.id, o.wall)
			}
		}
		if failed < cfg.Runs/2 {
			t.Errorf("%d of %d runs failed through, want most", failed, cfg.Runs)
		}
	})

	t.Run("a notice ends a run within 2 steps", func(t *testing.T) {
		// Arm 3: 5 failed calls at steps 4 to 8, the notice at step 9, the
		// degraded answer at step 10.
		for _, o := range row(ArmPerRunRemove).runs {
			if !o.results && o.steps != cfg.SearchStep+cfg.Threshold+1 {
				t.Errorf("arm 3 run %d: %d steps without results, want %d", o.id, o.steps, cfg.SearchStep+cfg.Threshold+1)
			}
		}
		// Arm 4: the answer comes the step after the notice; many runs
		// (most, on an idle machine) find the tool gone at their first
		// step, having never called it.
		first := 0
		for _, o := range row(ArmFleetRemove).runs {
			if o.results {
				continue
			}
			if o.noticeAt == 0 || o.steps != o.noticeAt+1 || !admitsDegraded(o.answer) {
				t.Errorf("arm 4 run %d: notice at step %d, %d steps, answer %q; want a degraded answer the step after the notice",
					o.id, o.noticeAt, o.steps, o.answer)
			}
			if o.noticeAt == 1 {
				first++
			}
		}
		if first < cfg.Runs/4 {
			t.Errorf("arm 4: %d of %d runs found the tool gone at step 1, want many", first, cfg.Runs)
		}
	})

	t.Run("the rows' order", func(t *testing.T) {
		r1, r2, r3, r4, r5 := row(1), row(2), row(3), row(4), row(5)
		if !(r1.Calls > r2.Calls && r2.Calls >= r3.Calls && r3.Calls > r4.Calls) {
			t.Errorf("calls at the vendor %d, %d, %d, %d: want 1 > 2 >= 3 > 4 (a per-run breaker refuses each run's later calls)",
				r1.Calls, r2.Calls, r3.Calls, r4.Calls)
		}
		if r1.Spend < r2.Spend {
			t.Errorf("spend $%.2f without a breaker, $%.2f with a per-run fail-fast one: want 1 >= 2", r1.Spend, r2.Spend)
		}
		if r4.Calls*4 > r3.Calls || r5.Calls*4 > r3.Calls {
			t.Errorf("fleet arms reached the vendor %d and %d times, per-run removal %d: want far fewer", r4.Calls, r5.Calls, r3.Calls)
		}
		if !(r2.Spend >= r3.Spend && r3.Spend > r4.Spend && r1.Spend > r3.Spend) {
			t.Errorf("spend $%.2f, $%.2f, $%.2f, $%.2f: want 1 > 3, 2 >= 3 > 4", r1.Spend, r2.Spend, r3.Spend, r4.Spend)
		}
		if r4.Spend*2 > r3.Spend {
			t.Errorf("spend: fleet removal $%.2f, per-run removal $%.2f: want less than half", r4.Spend, r3.Spend)
		}
		// Failing fast alone saves no spend: a run that got no results
		// spends its whole budget with or without a per-run breaker, and
		// the two rows differ only by the runs that got results in one
		// arm and not the other (a later call finding the vendor back,
		// which the per-run breaker may refuse).
		differ := 0
		for i, o1 := range r1.runs {
			o2 := r2.runs[i]
			switch {
			case !o1.results && !o2.results && (o1.steps != cfg.Steps || o2.steps != cfg.Steps):
				t.Errorf("run %d: %d steps without a breaker, %d with a per-run one, no results in either: want %d in both",
					i, o1.steps, o2.steps, cfg.Steps)
			case o1.results != o2.results:
				differ++
			}
		}
		if d := r2.Steps - r1.Steps; d > differ*cfg.Steps || -d > differ*cfg.Steps {
			t.Errorf("model steps %d without a breaker, %d with a per-run one: more apart than the %d runs whose results differ explain",
				r1.Steps, r2.Steps, differ)
		}
		if r5.Spend < r4.Spend*4 {
			t.Errorf("spend: fleet fail-fast $%.2f, fleet removal $%.2f: want removal to be where spend is saved", r5.Spend, r4.Spend)
		}
	})

	t.Run("breakerd counted what the breakers saved", func(t *testing.T) {
		// One check per count, each equal to the replay's own, and each
		// a count of something that happened.
		if err := rep.Err(); err != nil {
			t.Error(err)
		}
		checks := map[int]SavingsCheck{}
		for _, c := range rep.Savings {
			checks[c.Arm] = c
			if !c.OK() {
				t.Errorf("arm %d %s: breakerd counted %d, want %d (%s)", c.Arm, c.What, c.Got, c.Want, c.Terms)
			}
		}
		r1, r4, r5 := row(ArmNoBreaker), row(ArmFleetRemove), row(ArmFleetFailFast)
		if c := checks[ArmFleetFailFast]; c.What != "daemon denials" || c.Want < int64(r1.Calls/2) {
			t.Errorf("arm 5's check %+v: want its daemon denials, most of arm 1's %d calls", c, r1.Calls)
		}
		// Every arm-5 run made its twin's calls: the denials are the calls
		// kept from the vendor, the tail's refusals aside.
		if c := checks[ArmFleetFailFast]; c.Want != int64(r1.Calls-r5.Calls+r5.Recovery.TailDenials) {
			t.Errorf("arm 5's check wants %d (%s): its runs did not make arm 1's calls", c.Want, c.Terms)
		}
		if c := checks[ArmFleetRemove]; c.What != "tools removed" || c.Want < int64(cfg.Runs/2) || r4.StartedWithout == 0 {
			t.Errorf("arm 4's check %+v, %d runs started without the tool: want most runs removed, some from the start", c, r4.StartedWithout)
		}
		var out bytes.Buffer
		if err := rep.Print(&out); err != nil || strings.Count(out.String(), ": ok\n") != 2 {
			t.Errorf("the table prints %d savings checks as ok, want 2 (err %v)", strings.Count(out.String(), ": ok\n"), err)
		}
	})
}

// A count off by one fails the replay: the checks allow no slack.
func TestSavingsChecksFail(t *testing.T) {
	rows := []Row{
		{Arm: ArmNoBreaker, Calls: 110, ToolCalls: 110},
		{Arm: ArmFleetRemove, Breaker: "b4", Without: 8, StartedWithout: 6, Recovery: &Recovery{TailWithout: 1}},
		{Arm: ArmFleetFailFast, Breaker: "b5", Calls: 7, ToolCalls: 7, Denials: 105, Recovery: &Recovery{TailDenials: 2}},
	}
	for _, c := range []struct {
		name          string
		denied, taken int64
		bad           string
	}{
		{"exact", 110 - 7 + 2 + 2, 9, ""},
		{"a denial short", 110 - 7 + 2 + 1, 9, "arm 5's daemon denials: breakerd counted 106, the replay 107"},
		{"a removal more", 107, 10, "arm 4's tools removed: breakerd counted 10, the replay 9"},
	} {
		rep := &Report{Rows: rows, Savings: savingsChecks(rows, map[string]*pb.BreakerSavings{
			"b4": {ToolsRemoved: c.taken}, "b5": {DaemonDenials: c.denied}})}
		err := rep.Err()
		var out strings.Builder
		rep.printSavings(&out)
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%s: %v, want nil", c.name, err)
		case c.bad != "" && (!errors.Is(err, ErrSavings) || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%s: %v, want ErrSavings naming %q", c.name, err, c.bad)
		case c.bad != "" && !strings.Contains(out.String(), "MISMATCH"):
			t.Errorf("%s: printed %q, want a MISMATCH", c.name, out.String())
		}
		// Arm 5's runs called twice more than arm 1's (105 + 7 against
		// 110): refused where arm 1's got results, and said so.
		if !strings.Contains(out.String(), "+ 2 calls arm 5's runs made beyond arm 1's") {
			t.Errorf("%s: printed %q, want the extra calls named", c.name, out.String())
		}
	}
	// An Allow that failed at a client was its fallback's to decide:
	// breakerd may have counted a denial for it or not, and only that
	// much is slack.
	rows[2].ClientWire.AllowErrors = 1
	for denied, ok := range map[int64]bool{105: false, 106: true, 107: true, 108: true, 109: false} {
		c := savingsChecks(rows, map[string]*pb.BreakerSavings{"b4": {ToolsRemoved: 9}, "b5": {DaemonDenials: denied}})[0]
		if c.OK() != ok {
			t.Errorf("%d daemon denials with one Allow failed, %d wanted: OK() = %v, want %v", denied, c.Want, c.OK(), ok)
		}
	}
}

func TestPolicyYAMLParses(t *testing.T) {
	cfg := Default()
	set, err := policy.Parse([]byte(cfg.PolicyYAML()))
	if err != nil {
		t.Fatalf("policy.Parse(PolicyYAML()): %v", err)
	}
	got := set.For(NamePrefix + "abcd:arm4:web_search")
	want := policy.Policy{Threshold: 5, MinWorkers: 2, RateLimitTrips: 3, CooldownBase: 500 * time.Millisecond,
		CooldownCap: 15 * time.Second, Jitter: 0.2, ProbeTimeout: time.Second}
	if got.Threshold != want.Threshold || got.MinWorkers != want.MinWorkers || got.CooldownBase != want.CooldownBase ||
		got.CooldownCap != want.CooldownCap || got.Jitter != want.Jitter || got.ProbeTimeout != want.ProbeTimeout {
		t.Errorf("policy = %+v, want %+v", got, want)
	}
	if other := set.For("web_search"); other.CooldownBase != 30*time.Second {
		t.Errorf("a fleet breaker outside the replay gets cooldown %s, want breakerd's default 30s", other.CooldownBase)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Runs = 0 }, "--runs:"},
		{func(c *Config) { c.LastSearchStep = 30 }, "--last-search-step:"},
		{func(c *Config) { c.Workers = 1 }, "--workers:"},
		{func(c *Config) { c.Scale = 0.5 }, "--scale:"},
		{func(c *Config) { c.CooldownBase = time.Millisecond; c.Scale = 10 }, "--cooldown:"},
		{func(c *Config) { c.CooldownCap = time.Second }, "--cooldown-cap:"},
		{func(c *Config) { c.FailRate = 0 }, "--fail-rate:"},
		{func(c *Config) { c.Window = time.Minute }, "--window:"},
		{func(c *Config) { c.Window = 6 * time.Minute; c.WindowRate = 1.5 }, "--window-rate:"},
		{func(c *Config) { c.Window = 6 * time.Minute; c.WindowMinCalls = 1 }, "--window-min-calls:"},
		{func(c *Config) { c.SlowOutage = 25 * time.Second; c.FailRate = 0.5 }, "--slow-outage:"},
		{func(c *Config) { c.SlowOutage = time.Second }, "--slow-outage:"},
		{func(c *Config) { c.SlowOutage = 25 * time.Second; c.SlowCall = 10 * time.Millisecond }, "--slow-call:"},
	} {
		cfg := Default()
		tc.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want an error starting %q", err, tc.want)
		}
	}
	if err := Default().Validate(); err != nil {
		t.Errorf("Default().Validate() = %v", err)
	}
}

// TestRunBreaker walks the per-run breaker through its states on a time
// line the test moves.
func TestRunBreaker(t *testing.T) {
	cfg := Default()
	var now time.Duration
	b := newRunBreaker(cfg, func() time.Duration { return now })
	fail := func(context.Context) error { return errHTTP503 }
	ok := func(context.Context) error { return nil }
	ctx := context.Background()

	// closed: failures below the threshold go out
	for i := range cfg.Threshold {
		if denied, _ := b.call(ctx, fail); denied {
			t.Fatalf("call %d denied while closed", i+1)
		}
	}
	// open: denied without calling
	called := false
	if denied, err := b.call(ctx, func(context.Context) error { called = true; return nil }); !denied || called || err == nil {
		t.Fatalf("after %d failures: denied %v, called %v, err %v; want a denial", cfg.Threshold, denied, called, err)
	}
	now += cfg.CooldownBase - time.Millisecond
	if denied, _ := b.call(ctx, ok); !denied {
		t.Fatalf("a call 1ms before the cooldown ends went out")
	}
	// the cooldown passes: one probe; its failure doubles the cooldown
	now += time.Millisecond
	if denied, _ := b.call(ctx, fail); denied || b.nProbes != 1 {
		t.Fatalf("probe due: denied %v, probes %d", denied, b.nProbes)
	}
	next := time.Duration(b.verdict().Until-b.ms()) * time.Millisecond
	if next != cfg.CooldownBase*2 {
		t.Errorf("after a failed probe the next is in %s, want %s", next, cfg.CooldownBase*2)
	}
	// a successful probe closes it
	now += next
	if denied, _ := b.call(ctx, ok); denied || b.unavailable() || b.t.Read(searchTool, b.ms()).State != "closed" || b.nProbes != 2 {
		t.Fatalf("successful probe: denied %v, state %q, probes %d", denied, b.t.Read(searchTool, b.ms()).State, b.nProbes)
	}
}

var errHTTP503 = &client.HTTPError{StatusCode: 503, Status: "503 Service Unavailable"}

// replayRows replays cfg and returns its rows by arm, failing t on a
// warning, on a savings count that is not the replay's, and on a row
// whose vendor saw other calls than its model made.
func replayRows(t *testing.T, cfg Config) map[int]Row {
	t.Helper()
	rep, err := Replay(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	var out bytes.Buffer
	if err := rep.Print(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	for _, w := range rep.Warnings {
		t.Errorf("warning %q", w)
	}
	if err := rep.Err(); err != nil { // breakerd's savings counts among others
		t.Error(err)
	}
	rows := map[int]Row{}
	for _, r := range rep.Rows {
		rows[r.Arm] = r
		if r.Calls != r.ToolCalls {
			t.Errorf("arm %d: the vendor saw %d calls, the model's tool made %d", r.Arm, r.Calls, r.ToolCalls)
		}
	}
	return rows
}

// TestReplayPartialOutage replays a vendor that fails 30% of calls: the
// consecutive-failure arms never open (each failure run is ended by the
// next success), the window arm does, and the vendor counts what that
// saved and what it cost.
func TestReplayPartialOutage(t *testing.T) {
	testredis.Tier(t, "replay")
	cfg := Default()
	cfg.Runs = 120
	cfg.FailRate = 0.3
	cfg.Window = 6 * time.Minute
	rows := replayRows(t, cfg)
	if len(rows) != 6 || rows[ArmFleetWindow].Arm != ArmFleetWindow {
		t.Fatalf("arms %v, want 1 to 5 and 7", rows)
	}
	none := rows[ArmNoBreaker]
	for _, arm := range []int{ArmFleetRemove, ArmFleetFailFast} {
		r := rows[arm]
		if r.Wire.Trip != nil {
			t.Errorf("arm %d opened at %s on a 30%% failure rate: %v", arm, r.Wire.TripAt, r.Wire.Trip)
		}
		if r.Calls != none.Calls || r.Lacked != none.Lacked {
			t.Errorf("arm %d: %d calls, %d runs without results; never open, it should match arm 1's %d and %d",
				arm, r.Calls, r.Lacked, none.Calls, none.Lacked)
		}
	}
	w := rows[ArmFleetWindow]
	if w.Wire.Trip == nil {
		t.Fatalf("arm 7 never opened on a 30%% failure rate with failure_rate %g", cfg.WindowRate)
	}
	if got := w.Wire.Trip.GetDistinctWorkers(); got < int64(cfg.Quorum) {
		t.Errorf("arm 7 opened on failures from %d workers, quorum %d", got, cfg.Quorum)
	}
	if w.Calls >= none.Calls || w.Attempts >= none.Attempts {
		t.Errorf("arm 7: %d calls and %d attempts at the vendor, want fewer than arm 1's %d and %d", w.Calls, w.Attempts, none.Calls, none.Attempts)
	}
	// The cost: while open, runs whose calls would mostly have succeeded
	// answered without search.
	if w.Lacked <= none.Lacked || w.Admitted != w.Lacked {
		t.Errorf("arm 7: %d runs without results (%d admitted it), arm 1 %d: want more, each admitted", w.Lacked, w.Admitted, none.Lacked)
	}
}

func TestFailsIsAFixedShare(t *testing.T) {
	n := 0
	for run := range 200 {
		for call := range 50 {
			if fails(run, call, 0.3) {
				n++
			}
			// Shares nest: a call that fails at 30% fails at 50% and at 100%.
			if fails(run, call, 0.3) && !fails(run, call, 0.5) || !fails(run, call, 1) {
				t.Fatalf("fails(%d, %d): the shares do not nest", run, call)
			}
		}
	}
	// 10,000 draws: a fair 30% lands within ±2 points with p > 0.9999.
	if n < 2800 || n > 3200 {
		t.Errorf("fails at 0.3 chose %d of 10000 calls", n)
	}
}

func TestPolicyYAMLWindowArm(t *testing.T) {
	cfg := Default()
	cfg.Window = 6 * time.Minute
	set, err := policy.Parse([]byte(cfg.PolicyYAML()))
	if err != nil {
		t.Fatalf("policy.Parse(PolicyYAML()): %v", err)
	}
	if w := set.Warnings(); len(w) != 0 {
		t.Errorf("warnings %q", w)
	}
	got := set.For(armBreakerPrefix("abcd", ArmFleetWindow) + "web_search")
	if got.Mode != policy.ModeWindow || got.Window != 6*time.Second || got.FailureRate != 0.25 || got.MinCalls != 10 ||
		got.MinWorkers != cfg.Quorum || got.CooldownBase != 500*time.Millisecond {
		t.Errorf("arm 7's policy = %+v", got)
	}
	if got := set.For(armBreakerPrefix("abcd", ArmFleetRemove) + "web_search"); got.Mode != policy.ModeConsecutive || got.Threshold != 5 {
		t.Errorf("arm 4's policy = %+v, want consecutive with threshold 5", got)
	}
}

// TestReplaySlowOutage replays a vendor that answers every call in 25 s
// instead of failing: nothing counts a failure, so arms 4 and 5 never
// open; arm 8 counts slow calls, opens, and closes after the outage.
func TestReplaySlowOutage(t *testing.T) {
	testredis.Tier(t, "replay")
	cfg := Default()
	cfg.Runs = 120
	cfg.SlowOutage = 25 * time.Second
	rows := replayRows(t, cfg)
	if len(rows) != 6 || rows[ArmFleetSlow].Arm != ArmFleetSlow {
		t.Fatalf("arms %v, want 1 to 5 and 8", rows)
	}
	none := rows[ArmNoBreaker]
	if none.Lacked != 0 || none.Median < cfg.SlowOutage {
		t.Errorf("arm 1: %d runs without results, median run %s; want every run served, each waiting its %s call", none.Lacked, none.Median, cfg.SlowOutage)
	}
	for _, arm := range []int{ArmFleetRemove, ArmFleetFailFast} {
		if r := rows[arm]; r.Wire.Trip != nil || r.Calls != none.Calls {
			t.Errorf("arm %d: trip %v, %d calls; a slow vendor fails nothing, so it should never open and match arm 1's %d calls",
				arm, r.Wire.Trip, r.Calls, none.Calls)
		}
	}
	s := rows[ArmFleetSlow]
	trip := s.Wire.Trip
	if trip == nil {
		t.Fatal("arm 8 never opened on a vendor 25s slow with slow_call 2s")
	}
	if trip.GetFailures() < int64(cfg.Threshold) || trip.GetDistinctWorkers() < int64(cfg.Quorum) || !strings.Contains(trip.GetReason(), "slow") {
		t.Errorf("arm 8 opened on %d slow calls from %d workers (%q), want at least %d from %d, the reason saying slow",
			trip.GetFailures(), trip.GetDistinctWorkers(), trip.GetReason(), cfg.Threshold, cfg.Quorum)
	}
	if s.Calls >= none.Calls || s.Median >= none.Median {
		t.Errorf("arm 8: %d calls, median run %s; want fewer than arm 1's %d and shorter than its %s", s.Calls, s.Median, none.Calls, none.Median)
	}
	if s.Lacked == 0 || s.Admitted != s.Lacked {
		t.Errorf("arm 8: %d runs without results, %d admitted it; the price of removing a slow tool is runs without it, each said", s.Lacked, s.Admitted)
	}
	if rec := s.Recovery; rec == nil || !rec.Closed {
		t.Errorf("arm 8 did not close after the vendor recovered: %+v", rec)
	}
}

func TestPolicyYAMLSlowArm(t *testing.T) {
	cfg := Default()
	cfg.SlowOutage = 25 * time.Second
	set, err := policy.Parse([]byte(cfg.PolicyYAML()))
	if err != nil {
		t.Fatalf("policy.Parse(PolicyYAML()): %v", err)
	}
	if w := set.Warnings(); len(w) != 0 {
		t.Errorf("warnings %q", w)
	}
	got := set.For(armBreakerPrefix("abcd", ArmFleetSlow) + "web_search")
	if got.SlowCall != 33*time.Millisecond || got.SlowCallThreshold != cfg.Threshold || got.Threshold != cfg.Threshold {
		t.Errorf("arm 8's policy = %+v, want slow_call 33ms (2s / 60) and slow_call_threshold %d", got, cfg.Threshold)
	}
	if got := set.For(armBreakerPrefix("abcd", ArmFleetRemove) + "web_search"); got.SlowCall != 0 {
		t.Errorf("arm 4's policy counts slow calls: %+v", got)
	}
}
