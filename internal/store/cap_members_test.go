package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The cap's share is a share of the group's declared members
// (internal/breaker/cap.go), so healthy members count though they hold no
// state, a trip's fate does not hang on which other members merely hold a
// failure run, and a name the policy does not list is in no group.

// A group of 10 members, 8 of them healthy (holding no state), capped at
// 0.5: a second real outage opens (2 of 10 open), and so does every one up
// to the fifth; the sixth is capped.
func TestOpenFractionCapCountsHealthyMembers(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		members := make([]string, 10)
		for i := range members {
			members[i] = fmt.Sprintf("g:%d", i)
		}
		f, g := capFixture(t, b, 0.5, members...)
		names := g.Members
		for i, n := range names[:6] {
			f.fail(n, "w1")
			r := f.fail(n, "w2")
			want, capped := pb.State_STATE_OPEN, false
			if i == 5 {
				want, capped = pb.State_STATE_CLOSED, true // 6 of 10 would be open
			}
			if r.State.State != want || r.State.OpenFractionCapped != capped {
				t.Fatalf("outage %d of a group of 10 capped at 0.5: %v capped=%v, want %v capped=%v",
					i+1, r.State.State, r.State.OpenFractionCapped, want, capped)
			}
			if r.State.GroupMembers != 10 {
				t.Fatalf("Record(%q) = %d group members, want 10", n, r.State.GroupMembers)
			}
		}
		want := "6 of the group's 10 members would have been open"
		if got := f.capEvents(names[5]); len(got) != 1 || !strings.Contains(got[0], want) {
			t.Fatalf("open_fraction_cap events = %q, want one saying %q", got, want)
		}
		if st := f.get(names[9]); st.GroupMembers != 10 || st.GroupOpen != 5 || st.GroupKnown != 6 {
			t.Fatalf("Get(%q) = %d members, %d known, %d open; want 10, 6, 5", names[9], st.GroupMembers, st.GroupKnown, st.GroupOpen)
		}
	})
}

// Three failing members of a group of 4 capped at 0.67 (at most 2 open),
// each tripping on its second failure, in the order a, b, c: a and b open
// and c stays closed whatever the order in which the failures before the
// trips came (a member holding a failure run does not change the share).
func TestOpenFractionCapIndependentOfArrivalOrder(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		orders := map[string]string{
			"sequential":  "aabbcc",
			"interleaved": "abcabc",
			"c-first":     "caabbc",
		}
		p := policy.Default()
		p.Threshold, p.MinWorkers, p.Jitter = 2, 1, 0
		var groups []policy.Group
		for order := range orders {
			g := policy.Group{Name: b.Prefix + "grp-" + order, Members: breakers(b, order+":a", order+":b", order+":c", order+":d"),
				MaxOpenFraction: 0.67}
			known, open := store.GroupKeys(g.Name)
			t.Cleanup(func() { _ = b.Client.Del(context.Background(), known, open).Err() })
			groups = append(groups, g)
		}
		f := newFixture(t, b, store.Options{Policies: policy.NewSet(p).WithGroups(groups...)})
		for order, seq := range orders {
			for i, c := range seq {
				f.fail(b.Breaker(order+":"+string(c)), fmt.Sprintf("w%d", i))
			}
			var got []string
			for _, c := range "abc" {
				st := f.get(b.Breaker(order + ":" + string(c)))
				got = append(got, fmt.Sprintf("%c=%s capped=%v", c, strings.TrimPrefix(st.State.String(), "STATE_"), st.OpenFractionCapped))
			}
			want := []string{"a=OPEN capped=false", "b=OPEN capped=false", "c=CLOSED capped=true"}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("failures in order %s (%s): %v, want %v", seq, order, got, want)
			}
		}
	})
}

// TestSecurityMadeUpBreakerCannotCapARealTrip (M8): a worker (two worker ids
// of one token) opens a breaker of a made-up name beside a group's
// members; it is in no group, so a real trip by two workers of a member
// still opens, and the group counts only its members.
func TestSecurityMadeUpBreakerCannotCapARealTrip(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		p := policy.Default()
		p.Threshold, p.MinWorkers, p.Jitter = 2, 2, 0
		g := policy.Group{Name: b.Prefix + "grp", Members: breakers(b, "search:web", "search:news"), MaxOpenFraction: 0.5}
		known, open := store.GroupKeys(g.Name)
		t.Cleanup(func() { _ = b.Client.Del(context.Background(), known, open).Err() })
		f := newFixture(t, b, store.Options{Policies: policy.NewSet(p).WithGroups(g)})
		fake, real := b.Breaker("search:made-up"), g.Members[0]
		f.fail(fake, "evil/1")
		if r := f.fail(fake, "evil/2"); r.State.State != pb.State_STATE_OPEN || r.State.Group != "" {
			t.Fatalf("the made-up breaker: %v in group %q, want OPEN in no group", r.State.State, r.State.Group)
		}
		f.fail(real, "w1")
		r := f.fail(real, "w2")
		if r.State.State != pb.State_STATE_OPEN || r.State.OpenFractionCapped {
			t.Fatalf("a real trip by two workers beside a made-up open breaker: %v capped=%v, want OPEN", r.State.State, r.State.OpenFractionCapped)
		}
		if got := f.capEvents(real); len(got) != 0 {
			t.Fatalf("open_fraction_cap events on %s = %q, want none", real, got)
		}
		if k, o, err := f.st.GroupStatus(context.Background(), g.Name); err != nil || k != 1 || o != 1 {
			t.Fatalf("GroupStatus = %d known %d open %v, want 1 and 1 (the made-up breaker is no member)", k, o, err)
		}
	})
}
