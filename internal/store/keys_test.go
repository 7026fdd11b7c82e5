package store_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestKeysOfNamesThatWorkedKeepTheirKeys pins the encoding: a name that
// does not start with "}" keeps the keys it had before names starting with
// "}" got a hashed tag, so an upgrade loses no breaker's state.
func TestKeysOfNamesThatWorkedKeepTheirKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		want store.Keys
	}{
		{"web_search", store.Keys{State: "brk:{web_search}:state", Workers: "brk:{web_search}:workers", Events: "brk:{web_search}:events", RL: "brk:{web_search}:rl", Pause: "brk:{web_search}:pause", Window: "brk:{web_search}:win", Check: "brk:{web_search}:check", Records: "brk:{web_search}:rec"}},
		{"a}b", store.Keys{State: "brk:{a}b}:state", Workers: "brk:{a}b}:workers", Events: "brk:{a}b}:events", RL: "brk:{a}b}:rl", Pause: "brk:{a}b}:pause", Window: "brk:{a}b}:win", Check: "brk:{a}b}:check", Records: "brk:{a}b}:rec"}},
		{"{", store.Keys{State: "brk:{{}:state", Workers: "brk:{{}:workers", Events: "brk:{{}:events", RL: "brk:{{}:rl", Pause: "brk:{{}:pause", Window: "brk:{{}:win", Check: "brk:{{}:check", Records: "brk:{{}:rec"}},
		{"}lead", store.Keys{State: "brk:#{8fe6fc8e}}lead:state", Workers: "brk:#{8fe6fc8e}}lead:workers", Events: "brk:#{8fe6fc8e}}lead:events", RL: "brk:#{8fe6fc8e}}lead:rl", Pause: "brk:#{8fe6fc8e}}lead:pause", Window: "brk:#{8fe6fc8e}}lead:win", Check: "brk:#{8fe6fc8e}}lead:check", Records: "brk:#{8fe6fc8e}}lead:rec"}},
	} {
		if diff := cmp.Diff(tc.want, store.KeysOf(tc.name)); diff != "" {
			t.Errorf("KeysOf(%q) (-want +got):\n%s", tc.name, diff)
		}
	}
}

// clusterSlot is Redis Cluster's HASH_SLOT (redis.io, "Cluster
// specification"): CRC16/XMODEM of the hash tag, or of the whole key when
// it has no non-empty tag, mod 16384. The cluster test checks it against
// CLUSTER KEYSLOT, so the miniredis and single-Redis runs check slots too.
func clusterSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for _, c := range []byte(key) {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// names returns the hash-tag edge cases (made of "{", "}", "{}", "a}b",
// "x{}y", "}", unicode, 256 bytes) and n more drawn from the characters
// that make hash tags, all valid breaker names (printable, no leading or
// trailing space, at most 256 bytes).
func names(r *rand.Rand, n int) []string {
	out := []string{"{", "}", "{}", "}{", "a}b", "x{}y", "}lead", "}}", "{{}}", "ünï{cødé}", "}ünï",
		"☃", strings.Repeat("}", 256), strings.Repeat("é", 128), "}" + strings.Repeat("a", 255), "web_search"}
	alphabet := []rune("{}{}a:#*é☃ z")
	seen := map[string]bool{}
	for _, s := range out {
		seen[s] = true
	}
	for len(out) < n {
		var b strings.Builder
		for range 1 + r.IntN(24) {
			b.WriteRune(alphabet[r.IntN(len(alphabet))])
		}
		s := strings.TrimSpace(b.String())
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func TestEveryNameMapsToOneSlot(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range names(r, 2000) {
		k := store.KeysOf(n)
		s := clusterSlot(k.State)
		if clusterSlot(k.Workers) != s || clusterSlot(k.Events) != s || clusterSlot(k.RL) != s ||
			clusterSlot(k.Pause) != s || clusterSlot(k.Window) != s || clusterSlot(k.Check) != s || clusterSlot(k.Records) != s {
			t.Errorf("KeysOf(%q) = %+v: slots %d %d %d, want one", n, k, s, clusterSlot(k.Workers), clusterSlot(k.Events))
		}
	}
}

// TestEveryNameWorksOnTheCluster runs a generated set of names through
// every script on each backend: on the cluster, CLUSTER KEYSLOT agrees
// that each name's keys share a slot, every call succeeds (none is
// CROSSSLOT), List finds every name back from its keys, and one BatchGet
// across all of them (many slots) reads them all.
func TestEveryNameWorksOnTheCluster(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		ctx := context.Background()
		r := rand.New(rand.NewPCG(3, 4))
		gen := names(r, 60)
		if b.Name == "cluster" {
			for _, n := range gen {
				k := store.KeysOf(n)
				var slots []int64
				for _, key := range []string{k.State, k.Workers, k.Events, k.Check, k.Records} {
					s, err := b.Client.ClusterKeySlot(ctx, key).Result()
					if err != nil {
						t.Fatalf("CLUSTER KEYSLOT %q: %v", key, err)
					}
					if int(s) != clusterSlot(key) {
						t.Fatalf("CLUSTER KEYSLOT %q = %d, clusterSlot says %d", key, s, clusterSlot(key))
					}
					slots = append(slots, s)
				}
				if slots[0] != slots[1] || slots[0] != slots[2] || slots[0] != slots[3] || slots[0] != slots[4] {
					t.Errorf("KeysOf(%q) = %+v in slots %v, want one", n, k, slots)
				}
			}
		}
		// Writes use names unique to this run: the generated name with the
		// test's prefix after it, so its first characters (which decide the
		// tag) are the generated ones. They are deleted when the test ends.
		var used []string
		for _, n := range gen {
			if len(n)+len(b.Prefix) > 256 {
				n = n[:256-len(b.Prefix)]
				for !utf8.ValidString(n) {
					n = n[:len(n)-1]
				}
			}
			used = append(used, n+b.Prefix)
		}
		t.Cleanup(func() {
			for _, n := range used {
				k := store.KeysOf(n)
				for _, key := range []string{k.State, k.Workers, k.Events, k.Check, k.Records} {
					if err := b.Client.Del(context.Background(), key).Err(); err != nil {
						t.Errorf("cleanup %q: %v", key, err)
					}
				}
			}
		})
		// Half are tripped by failures (record.lua), half forced (force.lua).
		want := func(i int) pb.State {
			if i%2 == 0 {
				return pb.State_STATE_OPEN
			}
			return pb.State_STATE_FORCED_OPEN
		}
		for i, n := range used {
			if i%2 == 0 {
				f.trip(n)
			} else if _, err := f.st.Force(ctx, n, pb.ForceMode_FORCE_MODE_OPEN, "test", 0, "op"); err != nil {
				t.Fatalf("Force(%q): %v", n, err)
			}
			if got := f.get(n); got.State != want(i) || got.Breaker != n {
				t.Fatalf("Get(%q) = %q %v, want %v", n, got.Breaker, got.State, want(i))
			}
			if ev := f.events(n); len(ev) == 0 {
				t.Errorf("events(%q) is empty, want the trip", n)
			}
			// The recovery check's lease and transition touch the same
			// slot (check_lease.lua, recover.lua; never CROSSSLOT).
			l, err := f.st.TakeCheckLease(ctx, n, "d1", time.Minute)
			if err != nil || l.Granted != (i%2 == 0) {
				t.Fatalf("TakeCheckLease(%q) = %+v, %v; want granted only when open", n, l, err)
			}
			// A stale generation: the script runs, nothing moves.
			if moved, st, err := f.st.Recover(ctx, n, "d1", l.Gen-1); err != nil || moved || st.State != want(i) {
				t.Fatalf("Recover(%q, stale) = %v %v %v, want nothing moved", n, moved, st.GetState(), err)
			}
		}
		states, err := f.st.BatchGet(ctx, append([]string{f.Breaker("plain")}, used...))
		if err != nil {
			t.Fatalf("BatchGet across %d names: %v", len(used)+1, err)
		}
		if states[0].State != pb.State_STATE_CLOSED {
			t.Errorf("BatchGet(plain) = %v, want CLOSED", states[0].State)
		}
		for i, st := range states[1:] {
			if st.Breaker != used[i] || st.State != want(i) {
				t.Errorf("BatchGet[%d] = %q %v, want %q %v", i+1, st.Breaker, st.State, used[i], want(i))
			}
		}
		all, err := f.st.List(ctx, pb.State_STATE_OPEN, pb.State_STATE_FORCED_OPEN)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		listed := map[string]bool{}
		for _, st := range all {
			listed[st.Breaker] = true
		}
		for _, n := range used {
			if !listed[n] {
				t.Errorf("List does not name %q", n)
			}
		}
	})
}
