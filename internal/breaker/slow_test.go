package breaker

import (
	"strconv"
	"strings"
	"testing"

	"github.com/breakerd/breakerd/internal/quorum"
)

// TestSlowSampleIsBounded: a long slow run (pinned closed: counted, never
// tripped) keeps its count and only the last SlowSample latencies, and
// the reason's p50 is the lower median of those.
func TestSlowSampleIsBounded(t *testing.T) {
	p := params
	p.SlowCallMs, p.SlowCallThreshold = 2000, 3
	s, _, _ := Apply(p, State{}, Call{Op: OpForce, Actor: "ops", Mode: "closed"}, 1000)
	for i := range 40 {
		var res Result
		s, res, _ = Apply(p, s, Call{Op: OpRecord, Actor: "w" + strconv.Itoa(i%2), Evidence: quorum.Healthy,
			Ticket: Ticket{Gen: s.Gen}, Latency: int64(3000 + i)}, int64(2000+i))
		if !res.Counted || !res.Wrote {
			t.Fatalf("slow call %d: counted %v, wrote %v; want both", i, res.Counted, res.Wrote)
		}
	}
	if s.Slow != 40 || len(s.SlowLat) != SlowSample || s.SlowLat[0] != 3024 || s.SlowLat[SlowSample-1] != 3039 {
		t.Fatalf("slow %d, sample %v; want 40 and the last %d latencies (3024..3039)", s.Slow, s.SlowLat, SlowSample)
	}
	if got := strings.Count(s.Fields()["slow_lat"], ","); got != SlowSample-1 {
		t.Errorf("slow_lat holds %d entries, want %d", got+1, SlowSample)
	}
	if got := Median(s.SlowLat); got != 3031 {
		t.Errorf("p50 = %d, want 3031 (the lower median of 3024..3039)", got)
	}
	if got := FromFields(s.Fields(), nil, nil, nil); got.Slow != s.Slow || len(got.SlowBy) != 2 || len(got.SlowLat) != SlowSample {
		t.Errorf("FromFields(Fields()) = slow %d, by %v, sample %v; want them back", got.Slow, got.SlowBy, got.SlowLat)
	}
}

func TestSlowPhrase(t *testing.T) {
	for _, tc := range []struct{ last, want string }{
		{SlowMeasure(12, 0, 25000, 12, 2000), "p50 25s over the last 12 calls, limit 2s"},
		{SlowMeasure(1, 4, 2001, 1, 2000), "p50 2.0s over the last 1 call, limit 2s"},
		{"timeout after 30s", "timeout after 30s"},
		{"slow:1:2:x:4:5", "slow:1:2:x:4:5"},
	} {
		if got := SlowPhrase(tc.last); got != tc.want {
			t.Errorf("SlowPhrase(%q) = %q, want %q", tc.last, got, tc.want)
		}
	}
}
