package breaker

import (
	"testing"

	"github.com/breakerd/breakerd/internal/quorum"
)

func TestCapsTripBoundary(t *testing.T) {
	for _, c := range []struct {
		fraction      float64
		members, open int64 // the group's members; the other members open
		capped        bool
	}{
		{0.5, 4, 0, false},   // the first trip: never capped
		{0.01, 10, 0, false}, // whatever the fraction
		{0.5, 4, 1, false},   // 2 of 4: exactly the fraction
		{0.5, 4, 2, true},    // 3 of 4
		{0.5, 3, 1, true},    // 2 of 3
		{0.5, 10, 1, false},  // 2 of 10: healthy members count, though they hold no state
		{0.5, 10, 4, false},  // 5 of 10
		{0.5, 10, 5, true},   // 6 of 10
		{0.3, 10, 2, false},  // 3 of 10: exactly 0.3 (in millionths, no float error)
		{0.3, 10, 3, true},   // 4 of 10
		{0.7, 10, 6, false},  // 7 of 10: exactly 0.7
		{1, 5, 4, false},     // 1 never caps
		{0, 5, 4, false},     // no group
	} {
		p := Params{MaxOpenPPM: int64(c.fraction*PPM + 0.5), GroupMembers: c.members}
		if got := p.CapsTrip(GroupCounts{Open: c.open}); got != c.capped {
			t.Errorf("fraction %v, %d members, %d others open: capped %v, want %v", c.fraction, c.members, c.open, got, c.capped)
		}
	}
}

func TestCapTripOncePerRun(t *testing.T) {
	p := Params{Rule: quorum.Rule{Threshold: 1, MinWorkers: 1, RateLimitTrips: 1}, CooldownBase: 1000, CooldownCap: 8000,
		Retention: 10000, MaxOpenPPM: 500_000, GroupMembers: 4}
	full := GroupCounts{Open: 2}
	fail := Call{Op: OpRecord, Actor: "w1", Evidence: quorum.Failure, Last: "timeout", Group: full}
	s, res, ev := Apply(p, State{}, fail, 1)
	if s.Phase != "" || !s.Capped || res.Note != NoteCapped || !res.Counted || len(ev) != 1 ||
		ev[0].Kind != "open_fraction_cap" || ev[0].Note != "trip:3:4" {
		t.Fatalf("capped trip: state %+v, result %+v, events %+v", s, res, ev)
	}
	s, res, ev = Apply(p, s, fail, 2)
	if !s.Capped || res.Note != NoteCapped || len(ev) != 0 || s.Fails != 2 {
		t.Fatalf("second capped failure: state %+v, result %+v, events %+v; want no new event", s, res, ev)
	}
	s, _, _ = Apply(p, s, Call{Op: OpRecord, Actor: "w1", Evidence: quorum.Healthy}, 3)
	if s.Capped || s.Fails != 0 {
		t.Fatalf("after a success: %+v, want the run and the cap flag cleared", s)
	}
	fail.Group = GroupCounts{Open: 1}
	s, _, ev = Apply(p, s, fail, 4)
	if s.Phase != Open || s.Capped || len(ev) != 1 || ev[0].Kind != "transition" {
		t.Fatalf("with room in the group: state %+v, events %+v, want open", s, ev)
	}
}
