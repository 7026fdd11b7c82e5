package forgotten_test

import (
	"testing"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/forgotten"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestMatters: a pin and an enforced open period before its probe time
// matter; a probe due, a shadowed state and a closed breaker do not.
func TestMatters(t *testing.T) {
	t.Parallel()
	open := breaker.State{Gen: 2, Phase: breaker.Open, Opened: 100, ProbeAt: 200}
	for _, c := range []struct {
		what  string
		known breaker.State
		now   int64
		want  bool
	}{
		{"a pin", breaker.State{Gen: 1, Force: "open"}, 1_000, true},
		{"open before its probe time", open, 150, true},
		{"open at its probe time", open, 200, false},
		{"open, at some time", open, -1, true},
		{"shadowed open", breaker.State{Gen: 2, Phase: breaker.Open, ProbeAt: 200, Shadow: "on"}, 150, false},
		{"closed", breaker.State{Gen: 3}, 150, false},
	} {
		if got := forgotten.Matters(c.known, c.now); got != c.want {
			t.Errorf("%s: Matters = %v, want %v", c.what, got, c.want)
		}
	}
}

// TestForgottenReportsEachGenerationOnce: Redis behind the state heard is
// a loss, told once per generation heard; Redis at or past it is none.
func TestForgottenReportsEachGenerationOnce(t *testing.T) {
	t.Parallel()
	var told []forgotten.Lost
	r := forgotten.NewReports(func(l forgotten.Lost) { told = append(told, l) })
	pin := breaker.State{Gen: 4, Force: "open", ForceBy: "alice"}
	if r.Forgotten("b", pin, 4, 0) || r.Forgotten("b", pin, 5, 0) {
		t.Fatal("Redis at or past the generation heard: a loss")
	}
	for range 2 {
		if !r.Forgotten("b", pin, 0, 0) {
			t.Fatal("Redis at generation 0 under a pin heard at 4: no loss")
		}
	}
	pin.Gen = 6
	if !r.Forgotten("b", pin, 0, 0) {
		t.Fatal("a later pin lost: no loss")
	}
	if len(told) != 2 || told[0].Known.Gen != 4 || told[1].Known.Gen != 6 || !told[0].Pinned() || told[0].KnownState() != "forced_open" {
		t.Fatalf("told %+v, want the pins at generations 4 and 6, once each", told)
	}
}

// TestDeny: an open period heard denies until its probe time, then lets
// the probe be asked of Redis.
func TestDeny(t *testing.T) {
	t.Parallel()
	open := breaker.State{Gen: 2, Phase: breaker.Open, Opened: 100, Cooldown: 100, ProbeAt: 200}
	res, _, ok := forgotten.Deny(open, "w", 150)
	if !ok || res.Decision != pb.Decision_DECISION_DENIED_OPEN || res.RetryAfter != 50 {
		t.Fatalf("at 150: %+v %v, want DENIED_OPEN retrying after 50 ms", res, ok)
	}
	if _, _, ok := forgotten.Deny(open, "w", 200); ok {
		t.Fatal("at the probe time: still denied")
	}
}
