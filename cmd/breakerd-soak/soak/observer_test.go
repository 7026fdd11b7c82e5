package soak

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func probeAnswer(gen int64, lease string) *pb.AllowResponse {
	return &pb.AllowResponse{Decision: pb.Decision_DECISION_PROBE, Ticket: &pb.Ticket{Generation: gen, LeaseToken: lease},
		State: &pb.BreakerState{State: pb.State_STATE_HALF_OPEN, Generation: gen}}
}

func ev(id string, gen int64, from, to pb.State, atMs int) *pb.Event {
	return &pb.Event{Id: id, Kind: pb.EventKind_EVENT_KIND_TRANSITION, Generation: gen, From: from, To: to, AtMs: at(atMs).UnixMilli()}
}

const (
	closed   = pb.State_STATE_CLOSED
	open     = pb.State_STATE_OPEN
	halfOpen = pb.State_STATE_HALF_OPEN
)

// rules returns the rule of each violation, in order.
func rules(o *Observer) []string {
	var out []string
	for _, v := range o.Violations() {
		out = append(out, v.Rule)
	}
	return out
}

func want(t *testing.T, o *Observer, rs ...string) {
	t.Helper()
	got := rules(o)
	if fmt.Sprint(got) != fmt.Sprint(rs) {
		t.Errorf("violations %v, want rules %v: %v", got, rs, o.Violations())
	}
}

// Each bad history is flagged under its rule; its good twin is not.
func TestObserverFlagsTwoHolders(t *testing.T) {
	o := NewObserver(2*time.Second, 6*time.Second)
	o.Allow("b", "w1", at(0), at(10), probeAnswer(2, "L1"))
	o.Allow("b", "w2", at(100), at(110), probeAnswer(2, "L2")) // w1 neither recorded nor lapsed
	want(t, o, "two-holders")

	good := NewObserver(2*time.Second, 6*time.Second)
	good.Allow("b", "w1", at(0), at(10), probeAnswer(2, "L1"))
	good.Record("b", "w1", "L1", at(50), at(60), nil)
	good.Allow("b", "w2", at(100), at(110), probeAnswer(4, "L2"))   // after w1's Record was sent
	good.Allow("b", "w3", at(2200), at(2210), probeAnswer(6, "L3")) // after w2's lease lapsed
	// Overlapping requests: the order is unknown, so no verdict.
	good.Allow("c", "w1", at(0), at(100), probeAnswer(2, "L4"))
	good.Allow("c", "w2", at(50), at(150), probeAnswer(2, "L5"))
	want(t, good)
	if g := good.Counts().Grants; g != 5 {
		t.Errorf("%d grants counted, want 5", g)
	}
}

func TestObserverFlagsTheLog(t *testing.T) {
	chain := []*pb.Event{ev("1-0", 1, closed, open, 0), ev("2-0", 2, open, halfOpen, 1000), ev("3-0", 3, halfOpen, closed, 1100)}
	for _, tc := range []struct {
		name string
		next *pb.Event
		bad  bool
	}{
		{"duplicate", ev("4-0", 3, halfOpen, closed, 1200), true},
		{"gap", ev("4-0", 5, closed, open, 1200), true},
		{"out of order", ev("4-0", 2, closed, open, 1200), true},
		{"from is not the last to", ev("4-0", 4, open, halfOpen, 1200), true},
		{"restart before retention", ev("4-0", 1, closed, open, 5000), true},
		{"next", ev("4-0", 4, closed, open, 1200), false},
		{"restart after retention", ev("4-0", 1, closed, open, 1100+6000), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewObserver(2*time.Second, 6*time.Second)
			o.Log("b", "", chain, at(2000))
			o.Log("b", "3-0", []*pb.Event{chain[2], tc.next}, at(9000))
			if tc.bad {
				want(t, o, "log-order")
			} else {
				want(t, o)
			}
		})
	}
	t.Run("an entry read before is gone", func(t *testing.T) {
		o := NewObserver(2*time.Second, 6*time.Second)
		o.Log("b", "", chain, at(2000))
		o.Log("b", "3-0", []*pb.Event{ev("4-0", 4, closed, open, 3000)}, at(4000))
		want(t, o, "log-order")
		// The same after a killed master is a loss, counted.
		o = NewObserver(2*time.Second, 6*time.Second)
		o.Log("b", "", chain, at(2000))
		o.Killed(at(2500))
		o.Log("b", "3-0", []*pb.Event{chain[0], chain[1]}, at(4000))
		want(t, o)
		if n := o.Counts().LostEntries; n != 1 {
			t.Errorf("LostEntries %d, want 1", n)
		}
	})
}

func TestObserverFlagsATransitionMissingFromTheLog(t *testing.T) {
	o := NewObserver(2*time.Second, 6*time.Second)
	o.Log("b", "", []*pb.Event{ev("1-0", 1, closed, open, 0)}, at(10))
	seen := &pb.AllowResponse{Decision: pb.Decision_DECISION_DENIED_OPEN, State: &pb.BreakerState{State: open, Generation: 1}}
	o.Allow("b", "w1", at(0), at(20), seen) // in the log
	rec := &pb.RecordResponse{State: &pb.BreakerState{State: closed, Generation: 3}}
	o.Record("b", "w1", "", at(30), at(40), rec) // never logged
	o.Sweep(at(1000))
	want(t, o) // within LogGrace
	o.Sweep(at(40).Add(o.LogGrace))
	want(t, o, "log-missing")
	// A degraded answer is the daemon's own memory: not judged.
	d := NewObserver(2*time.Second, 6*time.Second)
	d.Record("b", "w1", "", at(30), at(40), &pb.RecordResponse{State: rec.State, Degraded: true})
	d.Sweep(at(100000))
	want(t, d)
}

func TestObserverFlagsAProbeInFlightPastItsLease(t *testing.T) {
	denied := &pb.AllowResponse{Decision: pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT, State: &pb.BreakerState{State: halfOpen, Generation: 2}}
	o := NewObserver(2*time.Second, 6*time.Second)
	o.Allow("b", "w1", at(0), at(10), probeAnswer(2, "L1"))
	o.Allow("b", "w2", at(1000), at(1010), denied) // within the lease: fine
	o.Allow("b", "w3", at(2500), at(2510), denied) // 2.49 s after the grant's answer
	o.Sweep(at(20000))
	want(t, o, "half-open")
}

func TestObserverFlagsGrowth(t *testing.T) {
	var flat, leak []Sample
	for i := range 50 {
		flat = append(flat, Sample{At: at(i * 1000), LiveHeap: float64(20<<20 + (i%3)<<20), Goroutines: 300})
		leak = append(leak, Sample{At: at(i * 1000), LiveHeap: float64(20<<20 + i*2<<20), Goroutines: float64(300 + i*5)})
	}
	o := NewObserver(2*time.Second, 6*time.Second)
	o.CheckFlat("d", flat, 0, nil)
	want(t, o)
	o.CheckFlat("d", leak, 0, nil)
	want(t, o, "flat", "flat")
	// Load: the later half serves more RPCs at once (peak +68, as a
	// loaded CI machine saw with 200 workers); within the workers'
	// allowance it is not a leak, past it it is.
	var busy []Sample
	for i := range 50 {
		g := 353.0
		if i >= 30 {
			g = 421
		}
		busy = append(busy, Sample{At: at(i * 1000), LiveHeap: 20 << 20, Goroutines: g})
	}
	o = NewObserver(2*time.Second, 6*time.Second)
	o.CheckFlat("d", busy, 200, nil)
	want(t, o)
	o.CheckFlat("d", busy, 10, nil)
	want(t, o, "flat")
	// A daemon whose metrics never gave what the rule reads is flagged,
	// not passed unjudged; one never scraped (no error) is not judged.
	o = NewObserver(2*time.Second, 6*time.Second)
	o.CheckFlat("d", nil, 10, nil)
	want(t, o)
	o.CheckFlat("d", nil, 10, errors.New("metrics without go_gc_heap_live_bytes"))
	want(t, o, "flat")
}

func TestObserverFlagsKeysPastRetention(t *testing.T) {
	o := NewObserver(2*time.Second, 6*time.Second)
	keys := []string{"brk:{b}:state", "brk:{b}:events"}
	within, past := at(0).Add(KeyLife+time.Second), at(0).Add(KeyLife+3*time.Second)
	o.KeysLeft("b", keys, at(0), within, time.Minute) // within the key life + 2 s
	want(t, o)
	o.KeysLeft("b", keys[1:], at(0), past, time.Minute) // the event stream outlives the state
	want(t, o)
	o.KeysLeft("b", keys, at(0), past, time.Minute)
	want(t, o, "keys")
	if c := o.Counts(); c.StateExpired != 1 {
		t.Errorf("StateExpired %d, want 1", c.StateExpired)
	}
}

// An Allow that got no answer may have been granted a probe: a denial
// near it is not judged.
func TestObserverDoesNotJudgeADenialNearAnUnansweredAllow(t *testing.T) {
	denied := &pb.AllowResponse{Decision: pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT, State: &pb.BreakerState{State: halfOpen, Generation: 2}}
	o := NewObserver(2*time.Second, 6*time.Second)
	o.Allow("b", "w1", at(0), at(10), probeAnswer(2, "L1"))
	o.AllowFailed("b", at(2000))
	o.Allow("b", "w3", at(2500), at(2510), denied)
	o.Sweep(at(20000))
	want(t, o)
	if n := o.Counts().Unjudged; n != 1 {
		t.Errorf("Unjudged %d, want 1", n)
	}
}

// An Allow answered from memory may have had its script run in Redis
// after the daemon stopped waiting (a stall): a denial near it is not
// judged either, where one with no such answer near is.
func TestObserverDoesNotJudgeADenialNearAnAnswerFromMemory(t *testing.T) {
	denied := &pb.AllowResponse{Decision: pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT, State: &pb.BreakerState{State: halfOpen, Generation: 2}}
	fromMemory := &pb.AllowResponse{Decision: pb.Decision_DECISION_DENIED_OPEN, Degraded: true}
	o := NewObserver(2*time.Second, 6*time.Second)
	o.Allow("b", "w1", at(0), at(10), probeAnswer(2, "L1"))
	o.Allow("b", "w2", at(2000), at(2300), fromMemory)
	o.Allow("b", "w3", at(2500), at(2510), denied)
	o.Allow("c", "w1", at(0), at(10), probeAnswer(2, "L2"))
	o.Allow("c", "w3", at(2500), at(2510), denied)
	o.Sweep(at(20000))
	want(t, o, "half-open")
	if v := o.Violations(); len(v) != 1 || v[0].Breaker != "c" {
		t.Errorf("violations %v, want c's denial only", v)
	}
}

// After a killed master, the entries read after the newest survivor are
// counted as lost (and those a worker was answered with), and the chain
// continues from the survivor without a violation.
func TestObserverCountsWhatTheKilledMasterLost(t *testing.T) {
	chain := []*pb.Event{ev("1-0", 1, closed, open, 0), ev("2-0", 2, open, halfOpen, 1000), ev("3-0", 3, halfOpen, closed, 1100)}
	o := NewObserver(2*time.Second, 6*time.Second)
	o.Record("b", "w1", "", at(1090), at(1110), &pb.RecordResponse{State: &pb.BreakerState{State: closed, Generation: 3}})
	o.Log("b", "", chain, at(1200))
	o.Killed(at(1300))
	o.Resync("b", chain[0], at(1400))
	c := o.Counts()
	if c.LostEntries != 2 || c.LostObserved != 1 || c.LostBreakers != 1 {
		t.Errorf("lost %d entries (%d told to a worker) on %d breakers, want 2 (1) on 1", c.LostEntries, c.LostObserved, c.LostBreakers)
	}
	if got := o.Cursor("b"); got != "1-0" {
		t.Errorf("cursor %q after the resync, want the survivor 1-0", got)
	}
	o.Log("b", "1-0", []*pb.Event{chain[0], ev("4-0", 2, open, halfOpen, 5000)}, at(6000))
	want(t, o)
	// Outside a failover the same new entry would break the chain.
	bad := NewObserver(2*time.Second, 6*time.Second)
	bad.Log("b", "", chain, at(1200))
	bad.Log("b", "3-0", []*pb.Event{chain[2], ev("4-0", 2, open, halfOpen, 5000)}, at(6000))
	want(t, bad, "log-order")
}

// A stream gone whole after the failover, idle past the event retention,
// expired: nothing is counted lost.
func TestObserverResyncTellsAnExpiredStream(t *testing.T) {
	chain := []*pb.Event{ev("1-0", 1, closed, open, 0), ev("2-0", 2, open, halfOpen, 1000)}
	o := NewObserver(2*time.Second, 6*time.Second)
	o.Log("b", "", chain, at(1200))
	o.Killed(at(70000))
	o.Resync("b", nil, at(71000))
	if c := o.Counts(); c.LostEntries != 0 || c.LostBreakers != 0 {
		t.Errorf("an expired stream counted as lost: %+v", c)
	}
	// Within the retention, the same is a loss.
	o = NewObserver(2*time.Second, 6*time.Second)
	o.Log("b", "", chain, at(1200))
	o.Killed(at(2000))
	o.Resync("b", nil, at(3000))
	if c := o.Counts(); c.LostEntries != 2 || c.LostBreakers != 1 {
		t.Errorf("a stream lost with the master: %+v, want 2 entries on 1 breaker", c)
	}
}

func forcedOpen(d pb.Decision, degraded bool) *pb.AllowResponse {
	return &pb.AllowResponse{Decision: d, Degraded: degraded, State: &pb.BreakerState{State: pb.State_STATE_FORCED_OPEN, Generation: 1}}
}

// A call let through at a breaker forced open is flagged, from Redis or
// from memory; a denial is not, nor a call let through once the restart
// without persistence wiped the pin.
func TestObserverFlagsACallLetThroughAtABreakerForcedOpen(t *testing.T) {
	o := NewObserver(2*time.Second, 6*time.Second)
	o.SetForced([]string{"f"})
	o.AllowForced("f", "w1", at(0), at(10), forcedOpen(pb.Decision_DECISION_DENIED_OPEN, false))
	o.AllowForced("f", "w1", at(20), at(30), forcedOpen(pb.Decision_DECISION_DENIED_OPEN, true))
	want(t, o)
	o.AllowForced("f", "w1", at(40), at(50), forcedOpen(pb.Decision_DECISION_ALLOWED, true))
	o.AllowForced("f", "w1", at(60), at(70), forcedOpen(pb.Decision_DECISION_PROBE, false))
	want(t, o, "forced-open", "forced-open")
	o.Wiped(at(1000))
	o.AllowForced("f", "w1", at(1100), at(1110), forcedOpen(pb.Decision_DECISION_ALLOWED, false))
	want(t, o, "forced-open", "forced-open")
	if c := o.Counts(); c.ForcedAnswers != 5 || c.ForcedDegraded != 2 || c.ForcedLet != 2 || c.ForcedWiped != 1 {
		t.Errorf("counts %+v, want 5 answers, 2 degraded, 2 let through, 1 after the wipe", c)
	}
}

// A call that fails past its caller's deadline is flagged when it
// overlaps a stall on its breaker's node (or the stall's settling), and
// only counted elsewhere: on another node, or before the stall.
func TestObserverFlagsACallPastItsDeadlineDuringAStall(t *testing.T) {
	o := NewObserver(2*time.Second, 6*time.Second)
	o.SetMasters(map[string]string{"a": "m1", "b": "m2"})
	o.StallBegins("m1", "SIGSTOP of m1", at(10_000))
	o.StallEnds("m1", at(11_000))
	o.Late("a", "Allow", "w1 via d1", at(7_000), at(9_000))   // before the stall
	o.Late("b", "Allow", "w1 via d1", at(10_000), at(12_000)) // another node
	want(t, o)
	o.Late("a", "Allow", "w1 via d1", at(9_000), at(11_000))  // runs into it
	o.Late("a", "Allow", "w1 via d1", at(15_000), at(17_000)) // within its settling
	o.Late("a", "Allow", "w1 via d1", at(17_000), at(19_000)) // after
	o.JudgeLate(nil)
	want(t, o, "late", "late")
	if c := o.Counts(); c.Late != 5 || c.LateStall != 2 {
		t.Errorf("counts %+v, want 5 late, 2 within the stall", c)
	}
	// While the host ran late by half the decision bound, no bound could
	// answer in time: counted, not flagged. A shorter lateness, or one
	// outside the call, excuses nothing.
	o = NewObserver(2*time.Second, 6*time.Second)
	o.SetMasters(map[string]string{"a": "m1"})
	o.StallBegins("m1", "SIGSTOP of m1", at(10_000))
	o.Late("a", "Allow", "w1 via d1", at(10_100), at(12_100))
	o.Late("a", "Allow", "w2 via d1", at(13_100), at(15_100))
	o.Late("a", "Allow", "w3 via d1", at(16_100), at(18_100))
	o.JudgeLate(Late{"": {{From: at(11_000), To: at(11_500)}, {From: at(14_000), To: at(14_499)}, {From: at(18_200), To: at(19_000)}}})
	want(t, o, "late", "late")
	if c := o.Counts(); c.LateExcused != 1 {
		t.Errorf("counts %+v, want 1 late call excused", c)
	}
	// The violation says what happened: the call, its caller, the fault
	// and how late.
	o = NewObserver(2*time.Second, 6*time.Second)
	o.SetMasters(map[string]string{"a": "m1"})
	o.StallBegins("m1", "blackholed link to m1", at(10_000))
	o.Late("a", "Record", "w007 via 127.0.0.1:7071", at(10_100), at(12_126))
	o.JudgeLate(nil)
	v := o.Violations()
	if len(v) != 1 {
		t.Fatalf("violations %v, want one", v)
	}
	for _, part := range []string{"Record by w007 via 127.0.0.1:7071", "blackholed link to m1", "26ms past the caller's 2s deadline"} {
		if !strings.Contains(v[0].Detail, part) {
			t.Errorf("violation %q does not say %q", v[0].Detail, part)
		}
	}
}

// Each daemon sends a stalled node to memory exactly once within the
// stall, or had it in memory already when the stall began: never (its
// callers waited the stall out) and twice (flapping) are flagged; a flip
// on another node or outside the stall is not its.
func TestObserverFlagsADaemonNotFlippingOnceInAStall(t *testing.T) {
	logs := []string{"daemon-0.log", "daemon-1.log"}
	stalled := func() *Observer {
		o := NewObserver(2*time.Second, 6*time.Second)
		o.SetMasters(map[string]string{"a": "m1", "b": "m2"})
		o.StallBegins("m1", "SIGSTOP of m1", at(10_000))
		o.StallEnds("m1", at(11_000))
		return o
	}
	good := stalled()
	good.KilledOn("m1", at(13_000)) // the next fault on m1 ends the stall's settling
	good.CheckStallFlips(logs, map[FlipKey][]time.Time{
		{"daemon-0.log", "m1"}: {at(10_300), at(30_000)}, // the second is not the stall's
		{"daemon-1.log", "m1"}: {at(10_400), at(13_100)}, // nor the kill's
		{"daemon-1.log", "m2"}: {at(10_500)},
	}, nil, nil)
	want(t, good)
	if c := good.Counts(); c.StallFlips != 2 {
		t.Errorf("%d flips counted within the stall, want 2", c.StallFlips)
	}
	bad := stalled()
	bad.CheckStallFlips(logs, map[FlipKey][]time.Time{
		{"daemon-0.log", "m1"}: {at(10_300), at(11_500)},
		{"daemon-1.log", "m2"}: {at(10_500)}, // none on m1
	}, nil, nil)
	want(t, bad, "stall-flips", "stall-flips")

	// daemon-0 sent m1 to memory just before the stall and kept it there;
	// daemon-1 had it back before the stall began, so needed a flip of
	// its own within it.
	before := map[FlipKey][]time.Time{
		{"daemon-0.log", "m1"}: {at(9_200)},
		{"daemon-1.log", "m1"}: {at(9_000)},
	}
	backs := map[FlipKey][]time.Time{{"daemon-1.log", "m1"}: {at(9_800)}}
	early := stalled()
	early.CheckStallFlips(logs, before, backs, nil)
	want(t, early, "stall-flips")
	if c := early.Counts(); c.StallInMemory != 1 || c.StallFlips != 0 {
		t.Errorf("counts %+v, want 1 daemon in memory when the stall began, no flip within it", c)
	}
	before[FlipKey{"daemon-0.log", "m1"}] = append(before[FlipKey{"daemon-0.log", "m1"}], at(10_600)) // twice
	before[FlipKey{"daemon-1.log", "m1"}] = append(before[FlipKey{"daemon-1.log", "m1"}], at(10_300))
	twice := stalled()
	twice.CheckStallFlips(logs, before, backs, nil)
	want(t, twice, "stall-flips")

	// A second flip once the stall is over, while the pulse saw the host
	// or the node late afresh (a span begun after the stall's end), is
	// that lateness's: counted apart. The stall's own lateness, going on
	// past its end, or none, excuses nothing.
	for _, c := range []struct {
		late Late
		want []string
	}{
		{Late{"m1": {{From: at(11_800), To: at(12_400)}}}, nil},
		{Late{"": {{From: at(11_500), To: at(11_900)}}}, nil},
		{Late{"m2": {{From: at(11_800), To: at(12_400)}}}, []string{"stall-flips"}},
		{Late{"m1": {{From: at(10_000), To: at(12_400)}}}, []string{"stall-flips"}},
		{nil, []string{"stall-flips"}},
	} {
		o := stalled()
		o.CheckStallFlips(logs, map[FlipKey][]time.Time{
			{"daemon-0.log", "m1"}: {at(10_300), at(12_500)},
			{"daemon-1.log", "m1"}: {at(10_400)},
		}, nil, c.late)
		want(t, o, c.want...)
		if n := o.Counts().StallFlipsExcused; n != int64(1-len(c.want)) {
			t.Errorf("late %v: %d flips excused, want %d", c.late, n, 1-len(c.want))
		}
	}

	// No flip while the host ran late by half the decision bound within
	// the stall (or within a bound after it) is not flagged, but counted;
	// a shorter lateness, or one long before, excuses nothing.
	none := map[FlipKey][]time.Time{}
	for _, c := range []struct {
		late Late
		want []string
	}{
		{Late{"": {{From: at(10_500), To: at(11_000)}}}, nil},
		{Late{"": {{From: at(11_800), To: at(12_400)}}}, nil},
		{Late{"": {{From: at(10_500), To: at(10_999)}}}, []string{"stall-flips", "stall-flips"}},
		{Late{"": {{From: at(5_000), To: at(9_000)}}}, []string{"stall-flips", "stall-flips"}},
		{Late{"m1": {{From: at(10_000), To: at(11_000)}}}, []string{"stall-flips", "stall-flips"}}, // the node's lateness is the stall
	} {
		o := stalled()
		o.CheckStallFlips(logs, none, nil, c.late)
		want(t, o, c.want...)
		if n := o.Counts().StallNoFlipExcused; n != int64(2-len(c.want)) {
			t.Errorf("late %v: %d daemons excused, want %d", c.late, n, 2-len(c.want))
		}
	}
}

// An answer from memory for a breaker on the stalled node is not a
// violation, also while the stall goes on; one on a node with no fault is
// (live-degraded), and the answers within the stall are counted.
func TestObserverCountsAnswersWithinAStall(t *testing.T) {
	o := NewObserver(2*time.Second, 6*time.Second)
	o.SetMasters(map[string]string{"a": "m1", "b": "m2"})
	o.StallBegins("m1", "SIGSTOP of m1", at(10_000))
	deg := &pb.AllowResponse{Decision: pb.Decision_DECISION_ALLOWED, Degraded: true}
	o.Allow("a", "w1", at(10_100), at(10_400), deg)
	o.Allow("b", "w1", at(10_100), at(10_400), deg)
	o.StallEnds("m1", at(11_000))
	o.JudgeLive(nil)
	want(t, o, "live-degraded")
	if c := o.Counts(); c.StallAnswers != 1 || c.StallDegraded != 1 {
		t.Errorf("counts %+v, want 1 answer within the stall, degraded", c)
	}
}
