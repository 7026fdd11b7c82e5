package outage_test

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/outage"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestShadowEventSeedsAShadowedMemoryBreaker: while Redis is away a
// daemon starts its in-memory breakers from the events it heard; a shadow
// trip seeds a breaker that still allows (its policy says nothing of
// shadow: an operator had set it).
func TestShadowEventSeedsAShadowedMemoryBreaker(t *testing.T) {
	t.Parallel()
	const now = 1_800_000_000_000
	ev := &pb.Event{Breaker: "b", Kind: pb.EventKind_EVENT_KIND_TRANSITION, From: pb.State_STATE_CLOSED,
		To: pb.State_STATE_OPEN, Generation: 3, CooldownMs: 30000, AtMs: now, Shadow: true}
	for _, shadow := range []bool{true, false} {
		ev.Shadow = shadow
		st, ok := outage.SeedOf(ev)
		if !ok {
			t.Fatal("an open event seeds nothing")
		}
		table := breaker.NewTable()
		table.Seed("b", st, now, 60000)
		p := store.ParamsOf(policy.Default(), 0)
		a := table.Allow("b", "w1", "t1", p, nil, now+1000, "")
		want := pb.Decision_DECISION_DENIED_OPEN
		if shadow {
			want = pb.Decision_DECISION_ALLOWED
		}
		if a.Decision != want || shadow && a.ShadowDecision != pb.Decision_DECISION_DENIED_OPEN {
			t.Errorf("memory Allow after an open event (shadow %v) = %v (shadow %v), want %v", shadow, a.Decision, a.ShadowDecision, want)
		}
	}
}

// TestJudgeInSendingOrder: a lost connection begins an outage at once;
// other failures once Timeouts in a row, counted in the order decisions
// were sent: an answer sent before the latest failure resets nothing, and
// a failure the memory does not answer for counts for nothing.
func TestJudgeInSendingOrder(t *testing.T) {
	t.Parallel()
	stall := errors.New("stalled")
	sent := time.Unix(100, 0)
	n := outage.New().Node("")
	if !n.Judge(n.Send(), sent, io.EOF, true) {
		t.Fatal("a lost connection: no outage")
	}
	n = outage.New().Node("")
	early := n.Send()
	for i := range outage.Timeouts - 1 {
		if n.Judge(n.Send(), sent, stall, true) {
			t.Fatalf("outage after %d stalls", i+1)
		}
	}
	if n.Judge(early, sent, nil, true) || n.Judge(n.Send(), sent, stall, false) {
		t.Fatal("an answer or an uncounted failure began an outage")
	}
	if !n.Judge(n.Send(), sent, stall, true) {
		t.Fatalf("%d stalls in a row (an earlier-sent answer between): no outage", outage.Timeouts)
	}
}

// TestANodeThatAnswersMeanwhileIsNoOutage: decisions that failed while
// their node answered a fresh connection, asked after they were sent,
// begin no outage, however many; an ask the node did not answer, or one
// begun before the decision was sent, clears nothing. One ask is in
// flight at a time, and one covers every decision sent before it began.
func TestANodeThatAnswersMeanwhileIsNoOutage(t *testing.T) {
	t.Parallel()
	stall := errors.New("stalled")
	at := func(s int64) time.Time { return time.Unix(100+s, 0) }
	n := outage.New().Node("")
	if !n.Ask(at(0), at(1)) || n.Ask(at(0), at(1)) {
		t.Fatal("a second ask while one is in flight, or none at first")
	}
	n.Asked(at(1), false)
	if n.Ask(at(0), at(2)) {
		t.Fatal("asked again for a decision the silent ask covered")
	}
	for range outage.Timeouts - 1 {
		n.Judge(n.Send(), at(0), stall, true)
	}
	if !n.Judge(n.Send(), at(0), stall, true) {
		t.Fatal("a node silent to a fresh connection: no outage")
	}

	n = outage.New().Node("")
	if !n.Ask(at(0), at(1)) {
		t.Fatal("no ask")
	}
	n.Asked(at(1), true)
	for i := range 3 * outage.Timeouts {
		if n.Judge(n.Send(), at(0), stall, true) {
			t.Fatalf("stall %d of a decision sent before the node answered: an outage", i+1)
		}
	}
	if !n.Judge(n.Send(), at(2), stall, true) {
		t.Fatal("a decision sent after the answer's ask began: no outage")
	}
	if !n.Ask(at(2), at(3)) {
		t.Fatal("no ask for a decision sent after the last one began")
	}
}

// TestADaemonThatRanLateIsNoOutage: stalls of decisions sent before the
// daemon last ran late begin no outage on any node, however many; a
// decision sent after it does, and a lost connection always does.
func TestADaemonThatRanLateIsNoOutage(t *testing.T) {
	t.Parallel()
	stall := errors.New("stalled")
	at := func(s int64) time.Time { return time.Unix(100+s, 0) }
	m := outage.New()
	m.RanLate(at(1))
	m.RanLate(at(0)) // an earlier word never moves it back
	if !m.RanLateSince(at(1)) || m.RanLateSince(at(2)) {
		t.Fatal("RanLateSince does not tell the latest late span's end")
	}
	for _, addr := range []string{"a:1", "b:2"} {
		n := m.Node(addr)
		for i := range 3 * outage.Timeouts {
			if n.Judge(n.Send(), at(0), stall, true) {
				t.Fatalf("%s: stall %d of a decision sent before the daemon ran late: an outage", addr, i+1)
			}
		}
		if !n.Judge(n.Send(), at(2), stall, true) {
			t.Fatalf("%s: a decision sent after the daemon ran late: no outage", addr)
		}
	}
	if !m.Node("c:3").Judge(m.Node("c:3").Send(), at(0), io.EOF, true) {
		t.Fatal("a lost connection while the daemon ran late: no outage")
	}
}

// TestEnterSeedsTheNodesBreakers: an outage seeds the node's table with
// the states heard of its own breakers only, begins once however many
// calls find it away, and answers from memory only when seeded.
func TestEnterSeedsTheNodesBreakers(t *testing.T) {
	t.Parallel()
	m := outage.New()
	for _, b := range []string{"here", "there"} {
		m.Observe(&pb.Event{Breaker: b, To: pb.State_STATE_FORCED_OPEN, Generation: 2})
	}
	n := m.Node("a")
	on := func(b string) (int64, bool) { return 60_000, b == "here" }
	begun := 0
	for range 2 {
		m.Enter(n, "key", 1_000, false, on, func() { begun++ })
	}
	if begun != 1 || !n.Down() || !m.Degraded() || m.DownNode("a") != n || n.Key() != "key" {
		t.Fatalf("begun %d times, down %v, degraded %v; want once, down", begun, n.Down(), m.Degraded())
	}
	if n.Seeded() {
		t.Error("seeded before any listing seeded the memory")
	}
	if names := n.Table().Names(1_000); len(names) != 1 || names[0] != "here" {
		t.Errorf("the node's table holds %v, want [here]", names)
	}
	if v := n.Table().Read("here", 1_000); v.State != "forced_open" {
		t.Errorf("here reads %+v, want forced_open", v)
	}
}

// TestClosedMemoryEntersNoOutage: once the memory is closed (its daemon
// shutting down), a call that fails because the Redis client was closed
// under it begins no outage: nothing is reported, nothing is degraded.
func TestClosedMemoryEntersNoOutage(t *testing.T) {
	t.Parallel()
	m := outage.New()
	n := m.Node("")
	m.Close()
	m.Enter(n, "key", 1_000, true, func(string) (int64, bool) { return 60_000, true }, func() {
		t.Error("an outage began after Close")
	})
	if n.Down() || m.Degraded() {
		t.Errorf("after Close: down %v, degraded %v; want neither", n.Down(), m.Degraded())
	}
}
