package store_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func TestListPagesCoverEveryBreaker(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		st := newFixture(t, b, store.Options{}).st
		ctx := context.Background()
		want := map[string]pb.State{}
		for i := range 30 {
			name := b.Breaker(fmt.Sprintf("page%02d", i))
			mode, state := pb.ForceMode_FORCE_MODE_OPEN, pb.State_STATE_FORCED_OPEN
			if i%3 == 0 {
				mode, state = pb.ForceMode_FORCE_MODE_CLOSED, pb.State_STATE_FORCED_CLOSED
			}
			if _, err := st.Force(ctx, name, mode, "paging", 0, "t"); err != nil {
				t.Fatal(err)
			}
			want[name] = state
		}
		list := func(states ...pb.State) (map[string]pb.State, int) {
			got := map[string]pb.State{}
			token, pages := "", 0
			for {
				page, next, err := st.ListPage(ctx, token, 10, states...)
				if err != nil {
					t.Fatalf("ListPage(%q) after %d pages: %v", token, pages, err)
				}
				pages++
				for _, s := range page {
					if strings.HasPrefix(s.Breaker, b.Prefix) {
						got[s.Breaker] = s.State
					}
				}
				if token = next; token == "" {
					return got, pages
				}
			}
		}
		got, pages := list()
		if len(got) != len(want) {
			t.Errorf("pages of 10 listed %d of the %d breakers", len(got), len(want))
		}
		for name, s := range want {
			if got[name] != s {
				t.Errorf("ListPage: %s = %v, want %v", name, got[name], s)
			}
		}
		// miniredis answers SCAN in one reply whatever the COUNT; Redis
		// pages by it.
		if b.Mini == nil && pages < 3 {
			t.Errorf("30 breakers in pages of 10 keys took %d pages, want at least 3", pages)
		}
		closed, _ := list(pb.State_STATE_FORCED_CLOSED)
		if len(closed) != 10 {
			t.Errorf("ListPage(FORCED_CLOSED) listed %d, want the 10 forced closed", len(closed))
		}
		if _, _, err := st.ListPage(ctx, "not-a-token", 10); !errors.Is(err, store.ErrBadPageToken) {
			t.Errorf("ListPage(forged token) = %v, want ErrBadPageToken", err)
		}
		if _, _, err := st.ListPage(ctx, "", 0); err == nil {
			t.Error("ListPage(count 0) succeeded")
		}
	})
}

// TestListLeavesOutAKeyOfAnotherType: a breaker whose state key holds a
// value breakerd did not write (a string where a hash belongs) is left out
// of the page with a warning naming it; the breakers beside it are listed.
func TestListLeavesOutAKeyOfAnotherType(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		logs := &syncBuffer{}
		st := newFixture(t, b, store.Options{Log: slog.New(slog.NewTextHandler(logs, nil))}).st
		ctx := context.Background()
		var names []string
		for i := range 3 {
			name := b.Breaker(fmt.Sprintf("typed%d", i))
			if _, err := st.Force(ctx, name, pb.ForceMode_FORCE_MODE_OPEN, "typing", 0, "t"); err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
		}
		bad := b.Breaker("typed-bad")
		if err := b.Client.Set(ctx, store.KeysOf(bad).State, "not a hash", 0).Err(); err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		b.ResetCounts()
		pages := int64(0)
		for token := ""; ; pages++ {
			page, next, err := st.ListPage(ctx, token, store.MaxPageSize)
			if err != nil {
				t.Fatalf("ListPage with a key of another type: %v", err)
			}
			for _, s := range page {
				got[s.Breaker] = true
			}
			if token = next; token == "" {
				pages++
				break
			}
		}
		// Each page is one SCAN and one pipelined read, the key of
		// another type left out within it.
		if n := b.RoundTrips(); n > 2*pages {
			t.Errorf("%d pages took %d Redis round trips, want at most 2 a page", pages, n)
		}
		all, err := st.List(ctx)
		if err != nil {
			t.Fatalf("List with a key of another type: %v", err)
		}
		listed := map[string]bool{}
		for _, s := range all {
			listed[s.Breaker] = true
		}
		for _, n := range names {
			if !got[n] || !listed[n] {
				t.Errorf("%s beside the key of another type: in pages %v, in List %v; want both", n, got[n], listed[n])
			}
		}
		if got[bad] || listed[bad] {
			t.Errorf("%s, whose key is not a breaker's, was listed", bad)
		}
		if !strings.Contains(logs.String(), bad) {
			t.Errorf("no warning names %s: %q", bad, logs.String())
		}
	})
}
