package breaker

import (
	"testing"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The parent rule (parent.go) on single states, at its boundaries.
func TestParentVerdict(t *testing.T) {
	const now = 1_000_000
	open := State{Phase: Open, Gen: 3, Opened: now - 20000, ProbeAt: now - 1, Cooldown: 19999}
	for _, tc := range []struct {
		name   string
		s      State
		pv     Parent
		want   pb.Decision
		retry  int64
		due    bool
		wrote  bool
		public string
	}{
		{"closed child, parent open", State{}, Parent{Decision: pb.Decision_DECISION_DENIED_OPEN, Until: now + 5000},
			pb.Decision_DECISION_DENIED_PARENT_OPEN, 5000, false, false, "closed"},
		{"parent open until exactly now: due", State{}, Parent{Decision: pb.Decision_DECISION_DENIED_OPEN, Until: now},
			pb.Decision_DECISION_DENIED_PARENT_OPEN, 0, true, false, "closed"},
		{"parent forced open with no end", State{}, Parent{Decision: pb.Decision_DECISION_DENIED_FORCED_OPEN},
			pb.Decision_DECISION_DENIED_PARENT_OPEN, 0, false, false, "closed"},
		{"open child past its cooldown stays open", open, Parent{Decision: pb.Decision_DECISION_DENIED_PAUSED, Until: now + 1},
			pb.Decision_DECISION_DENIED_PARENT_OPEN, 1, false, false, "open"},
		{"open child, caller holds the parent's probe: the child probes", open, Parent{Decision: pb.Decision_DECISION_PROBE},
			pb.Decision_DECISION_PROBE, 0, false, true, "half_open"},
		{"child pinned closed beats the parent", State{Force: "closed", Gen: 1},
			Parent{Decision: pb.Decision_DECISION_DENIED_OPEN, Until: now + 5000}, pb.Decision_DECISION_ALLOWED, 0, false, false, "forced_closed"},
		{"child pinned open keeps its own denial", State{Force: "open", Gen: 1},
			Parent{Decision: pb.Decision_DECISION_DENIED_OPEN, Until: now + 5000}, pb.Decision_DECISION_DENIED_FORCED_OPEN, 0, false, false, "forced_open"},
		{"paused child, parent denies: the parent's word", State{Phase: Paused, Gen: 2, PauseUntil: now + 60000},
			Parent{Decision: pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT, Until: now + 10}, pb.Decision_DECISION_DENIED_PARENT_OPEN, 10, false, false, "paused"},
		{"parent allowed", State{}, Parent{Decision: pb.Decision_DECISION_ALLOWED}, pb.Decision_DECISION_ALLOWED, 0, false, false, "closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, res, events := Apply(params, tc.s, Call{Op: OpAllow, Actor: "w1", Token: "tok", Parent: tc.pv}, now)
			if res.Decision != tc.want || res.RetryAfter != tc.retry || res.ParentDue != tc.due || res.Wrote != tc.wrote {
				t.Errorf("Allow = %v retry %d due %v wrote %v; want %v retry %d due %v wrote %v",
					res.Decision, res.RetryAfter, res.ParentDue, res.Wrote, tc.want, tc.retry, tc.due, tc.wrote)
			}
			if s.Public() != tc.public {
				t.Errorf("state after = %s, want %s", s.Public(), tc.public)
			}
			if res.Decision == pb.Decision_DECISION_DENIED_PARENT_OPEN && len(events) != 0 {
				t.Errorf("a parent's denial emitted %v, want nothing", events)
			}
		})
	}
}
