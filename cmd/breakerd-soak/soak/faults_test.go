package soak

import (
	"testing"
	"time"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// A trip from closed after fewer timeout Records than the threshold could
// count (one applied twice) is flagged; after enough, it is not.
func TestObserverFlagsACountAppliedTwice(t *testing.T) {
	feed := func(fails int) *Observer {
		o := NewObserver(2*time.Second, 6*time.Second)
		o.Log("b", "", []*pb.Event{ev("1-0", 1, closed, open, 0), ev("2-0", 2, open, halfOpen, 1000), ev("3-0", 3, halfOpen, closed, 1100)}, at(1200))
		o.Failure("b", at(500), at(510)) // before the run began (answered before the close)
		for i := range fails {
			o.Failure("b", at(2000+100*i), at(2010+100*i))
		}
		o.Failure("b", at(2900), time.Time{}) // sent after the trip: cannot count
		o.Log("b", "3-0", []*pb.Event{ev("3-0", 3, halfOpen, closed, 1100), ev("4-0", 4, closed, open, 2500)}, at(2600))
		o.Sweep(at(4000)) // too early to judge: a Record sent by then may be unreported
		if n := o.Counts().Trips; n != 0 {
			t.Fatalf("%d trips judged 1.5 s after the trip, want 0", n)
		}
		o.Sweep(at(8000))
		if n := o.Counts().Trips; n != 1 {
			t.Fatalf("%d trips judged, want 1", n)
		}
		return o
	}
	want(t, feed(2), "count-twice")
	want(t, feed(Threshold))
}

func allowed(gen int64, s pb.State, until time.Time) *pb.AllowResponse {
	st := &pb.BreakerState{State: s, Generation: gen}
	if !until.IsZero() {
		st.DenyUntilMs = until.UnixMilli()
	}
	return &pb.AllowResponse{Decision: pb.Decision_DECISION_ALLOWED, State: st}
}

// An answer CLOSED inside a cooldown a worker was told is a violation
// unless a daemon logged a loss near it, or the master's kill lost it; an
// answer CLOSED after the cooldown is none.
func TestObserverFlagsAnOpenBreakerForgotten(t *testing.T) {
	feed := func() *Observer {
		o := NewObserver(2*time.Second, 6*time.Second)
		o.Allow("b", "w1", at(0), at(10), &pb.AllowResponse{Decision: pb.Decision_DECISION_DENIED_OPEN,
			State: &pb.BreakerState{State: open, Generation: 1, DenyUntilMs: at(4000).UnixMilli()}})
		o.Allow("b", "w2", at(1000), at(1010), allowed(0, closed, time.Time{}))
		o.Allow("c", "w1", at(0), at(10), &pb.AllowResponse{Decision: pb.Decision_DECISION_DENIED_OPEN,
			State: &pb.BreakerState{State: open, Generation: 1, DenyUntilMs: at(1000).UnixMilli()}})
		o.Allow("c", "w2", at(1200), at(1210), allowed(0, closed, time.Time{})) // after its cooldown
		return o
	}
	o := feed()
	o.JudgeForgotten(map[string][]time.Time{"c": {at(1500)}}) // another breaker's loss
	want(t, o, "forgot-open")
	logged := feed()
	logged.JudgeForgotten(map[string][]time.Time{"b": {at(1500)}})
	want(t, logged)
	if c := logged.Counts(); c.Forgotten != 1 || c.ForgottenLogged != 1 {
		t.Errorf("counts %+v, want 1 forgotten, 1 with a loss logged", c)
	}
	failover := feed()
	failover.Killed(at(500))
	failover.JudgeForgotten(nil)
	want(t, failover)
}

// A node flips at most twice per fault injected on it, plus one; a node
// with no fault never.
func TestObserverFlagsFlapping(t *testing.T) {
	o := NewObserver(2*time.Second, 6*time.Second)
	o.Killed(at(0))
	o.CheckFlaps(map[FlipKey][]time.Time{{"daemon-0.log", ""}: flips(3), {"daemon-1.log", ""}: flips(4)}, nil)
	want(t, o, "flapping")

	cl := NewObserver(2*time.Second, 6*time.Second)
	cl.SetMasters(map[string]string{"a": "m1", "b": "m2"})
	cl.KilledOn("m1", at(0))
	cl.CheckFlaps(map[FlipKey][]time.Time{{"daemon-0.log", "m1"}: flips(3), {"daemon-1.log", "m1"}: flips(1)}, nil)
	want(t, cl)
	cl.CheckFlaps(map[FlipKey][]time.Time{{"daemon-0.log", "m2"}: flips(1)}, nil) // no fault on m2
	want(t, cl, "flapping")
}

// flips returns n flip times, a second apart from at(1000).
func flips(n int) []time.Time {
	var out []time.Time
	for i := range n {
		out = append(out, at(1000*(i+1)))
	}
	return out
}

// A flip of a node with no fault injected is left out of the flapping
// rule only when the pulse saw that node, or the host, late within
// LateWindow before it; a span on another node, or one that ended
// earlier, excuses nothing.
func TestFlapsExcusedOnlyByALateSpanJustBefore(t *testing.T) {
	cl := NewObserver(2*time.Second, 6*time.Second)
	cl.SetMasters(map[string]string{"a": "m1", "b": "m2"})
	late := Late{
		"m2": {{From: at(900), To: at(1200)}},       // overlaps the flip at 1000
		"":   {{From: at(2800), To: at(2900)}},      // the host, 100 ms before the flip at 3000
		"m1": {{From: at(4000), To: at(5000 - 10)}}, // m1's: excuses nothing on m2
	}
	cl.CheckFlaps(map[FlipKey][]time.Time{{"daemon-0.log", "m2"}: {at(1000), at(3000)}}, late)
	want(t, cl)
	if c := cl.Counts(); c.FlipsExcused != 2 {
		t.Errorf("%d flips excused, want 2", c.FlipsExcused)
	}
	old := Late{"m2": {{From: at(100), To: at(5000 - int(LateWindow/time.Millisecond) - 1)}}}
	cl.CheckFlaps(map[FlipKey][]time.Time{{"daemon-1.log", "m2"}: {at(5000)}}, old)
	want(t, cl, "flapping")
	cl.CheckFlaps(map[FlipKey][]time.Time{{"daemon-1.log", "m2"}: {at(5000)}}, late)
	want(t, cl, "flapping", "flapping")
}

// On a Cluster an answer from a daemon's memory for a breaker whose
// master had no fault injected is a violation; for the killed master's
// breakers after the kill it is none.
func TestObserverFlagsALiveMasterDegraded(t *testing.T) {
	deg := &pb.AllowResponse{Decision: pb.Decision_DECISION_ALLOWED, Degraded: true, State: &pb.BreakerState{State: closed}}
	o := NewObserver(2*time.Second, 6*time.Second)
	o.SetMasters(map[string]string{"a": "m1", "b": "m2"})
	o.Allow("a", "w1", at(0), at(10), deg) // before any fault
	o.KilledOn("m1", at(1000))
	o.Allow("a", "w1", at(1100), at(1200), deg)
	o.Record("a", "w1", "", at(1300), at(1310), &pb.RecordResponse{Degraded: true, State: &pb.BreakerState{State: closed}})
	o.Allow("b", "w1", at(1100), at(1200), allowed(0, closed, time.Time{}))
	o.Allow("b", "w2", at(1100), at(1200), deg) // m2 had no fault
	o.JudgeLive(nil)
	want(t, o, "live-degraded", "live-degraded")
	if c := o.Counts(); c.LiveAnswers != 3 || c.LiveDegraded != 2 || c.Degraded != 4 {
		t.Errorf("counts %+v, want 3 live answers, 2 of them degraded, 4 degraded in all", c)
	}
	// Without masters (one node) a degraded answer is only counted.
	one := NewObserver(2*time.Second, 6*time.Second)
	one.Allow("a", "w1", at(0), at(10), deg)
	one.JudgeLive(nil)
	want(t, one)
}

// A degraded answer on a master with no fault injected is excused only
// when the pulse saw that master, or the host, late within LateWindow
// before it; excused ones are counted.
func TestLiveDegradedExcusedOnlyByALateSpanJustBefore(t *testing.T) {
	deg := &pb.AllowResponse{Decision: pb.Decision_DECISION_ALLOWED, Degraded: true, State: &pb.BreakerState{State: closed}}
	o := NewObserver(2*time.Second, 6*time.Second)
	o.SetMasters(map[string]string{"a": "m1", "b": "m2", "c": "m3"})
	o.Allow("a", "w1", at(1000), at(1010), deg) // m1 late until 900
	o.Allow("b", "w1", at(1000), at(1010), deg) // the host late until 950
	o.Allow("b", "w2", at(8000), at(8010), deg) // nothing late near it
	o.Allow("c", "w2", at(8000), at(8010), deg) // m1's span is not m3's
	o.JudgeLive(Late{
		"m1": {{From: at(600), To: at(900)}, {From: at(7900), To: at(8005)}},
		"":   {{From: at(700), To: at(950)}},
	})
	want(t, o, "live-degraded", "live-degraded")
	if c := o.Counts(); c.LiveDegraded != 4 || c.LiveExcused != 2 {
		t.Errorf("counts %+v, want 4 live answers degraded, 2 of them excused", c)
	}
}

// What one master's kill or restart loses is excused only for its own
// breakers: a transition gone from another master's breaker is a
// violation.
func TestObserverExcusesALossOnlyOnItsMaster(t *testing.T) {
	o := NewObserver(2*time.Second, 6*time.Second)
	o.SetMasters(map[string]string{"a": "m1", "b": "m2"})
	for _, b := range []string{"a", "b"} {
		o.Log(b, "", []*pb.Event{ev("1-0", 1, closed, open, 0)}, at(100))
	}
	o.WipedOn("m1", at(500))
	for _, b := range []string{"a", "b"} {
		o.Log(b, "1-0", nil, at(2000)) // the entry is gone
	}
	want(t, o, "log-order")
	if v := o.Violations(); len(v) != 1 || v[0].Breaker != "b" {
		t.Errorf("violations %v, want one on b (m2 was not restarted)", v)
	}
	if c := o.Counts(); c.Wiped != 1 {
		t.Errorf("counts %+v, want 1 wiped (a's entry)", c)
	}
}

// A loss logged for a breaker whose master had no fault injected by then
// is a violation; after a fault on its master it is counted only.
func TestObserverFlagsAFalseLoss(t *testing.T) {
	o := NewObserver(2*time.Second, 6*time.Second)
	o.WipedOn("", at(5000))
	o.JudgeLosses(map[string][]time.Time{"a": {at(1000), at(6000)}})
	want(t, o, "false-loss")
	cl := NewObserver(2*time.Second, 6*time.Second)
	cl.SetMasters(map[string]string{"a": "m1", "b": "m2"})
	cl.WipedOn("m1", at(5000))
	cl.JudgeLosses(map[string][]time.Time{"a": {at(6000)}, "b": {at(7000)}})
	want(t, cl, "false-loss")
	if v := cl.Violations(); len(v) != 1 || v[0].Breaker != "b" {
		t.Errorf("violations %v, want one on b (m2 kept its state)", v)
	}
	if c := cl.Counts(); c.Losses != 2 || c.FalseLosses != 1 {
		t.Errorf("counts %+v, want 2 losses, 1 false", c)
	}
}

// The stall-flips rule leaves out the killed daemon only when it was
// down or starting again during the stall: not at the default times.
func TestKilledDaemonNearAStall(t *testing.T) {
	c := Config{Duration: time.Minute, DaemonKillAt: 0.25, StallAt: 0.4, FailoverAt: 0.5, RestartAt: 0.75}
	f := newFaultClock(c, t0)
	if f.killedNear(f.stallAt) {
		t.Errorf("default times: the killed daemon (kill %s, start %s) counted as down near the stall at %s", f.killAt, f.startAt, f.stallAt)
	}
	for _, at := range []float64{0.2, 0.25, 0.3} {
		if c.StallAt = at; !newFaultClock(c, t0).killedNear(newFaultClock(c, t0).stallAt) {
			t.Errorf("stall at %g of the run, kill at 0.25: not counted as down near it", at)
		}
	}
	c.DaemonKillAt = -1
	if f := newFaultClock(c, t0); f.killedNear(f.stallAt) {
		t.Error("no daemon kill, yet counted as down near the stall")
	}
}
