package httpapi

import (
	"strings"
	"testing"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestPartLen: a snapshot part takes at most snapshotPart states, no more
// of them than fit in snapshotPartBytes, and at least one.
func TestPartLen(t *testing.T) {
	states := func(n, reason int) []*pb.BreakerState {
		out := make([]*pb.BreakerState, n)
		for i := range out {
			out[i] = &pb.BreakerState{Breaker: "b", Reason: strings.Repeat("r", reason)}
		}
		return out
	}
	for _, tc := range []struct {
		what   string
		states []*pb.BreakerState
		want   int
	}{
		{"none", nil, 0},
		{"small, fewer than a part", states(10, 10), 10},
		{"small, more than a part", states(snapshotPart+5, 10), snapshotPart},
		{"large: the bytes cut first", states(10, 50<<10), 2},
		{"one larger than the bound", states(3, snapshotPartBytes+1), 1},
	} {
		if got := partLen(tc.states); got != tc.want {
			t.Errorf("%s: partLen = %d, want %d", tc.what, got, tc.want)
		}
	}
}
