package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/breakerd/breakerd/internal/httpapi"
	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestSecuritySnapshotComesInBoundedParts (N2): GET /v1/watch opened with
// one unpaged List of every denying breaker, one event however many there
// were (20,000 open breakers: 18.5 MB, held by each stream at once). With
// more than two parts' worth open, the snapshot comes as event: snapshot
// parts of at most httpapi.SnapshotPart states, each announcing the
// stream's heartbeat_ms, every part but the last with more true, and
// together they list every open breaker. Each open state here carries a
// Force reason of 256 bytes, so the parts' byte bound is met too.
func TestSecuritySnapshotComesInBoundedParts(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		ctx := context.Background()
		d := daemontest.StartWith(t, b, daemontest.Options{HTTP: &httpapi.Options{Watch: &httpapi.Watch{}}})
		n := 2*httpapi.SnapshotPart + 10
		for i := range n {
			if _, err := d.Store.Force(ctx, b.Breaker(fmt.Sprint("snap-", i)), pb.ForceMode_FORCE_MODE_OPEN, strings.Repeat("r", 256), 0, "op"); err != nil {
				t.Fatal(err)
			}
		}
		// A snapshot the daemon could not read in time (a busy host) ends
		// the stream with resync, and a client opens it again.
		var s *sseStream
		var e sseEvent
		daemontest.Eventually(t, "a stream that opens with its snapshot", func() bool {
			s = watch(t, d, nil, "", "")
			e = s.next(t)
			if e.typ == "resync" {
				s.cancel()
				return false
			}
			return true
		})
		listed := map[string]bool{}
		parts := 0
		for more := true; more; parts++ {
			if parts > 0 {
				e = s.next(t)
			}
			if e.typ != "snapshot" {
				t.Fatalf("snapshot part %d is %q %s", parts, e.typ, e.data)
			}
			m := e.json(t)
			states, _ := m["states"].([]any)
			if len(states) > httpapi.SnapshotPart {
				t.Errorf("snapshot part %d lists %d states, want at most %d", parts, len(states), httpapi.SnapshotPart)
			}
			// JSON takes more bytes than protobuf: 4 times is generous.
			if len(e.data) > 4*httpapi.SnapshotPartBytes {
				t.Errorf("snapshot part %d is %d bytes, want at most about %d", parts, len(e.data), 4*httpapi.SnapshotPartBytes)
			}
			if m["heartbeat_ms"] != fmt.Sprint(httpapi.DefaultHeartbeat.Milliseconds()) {
				t.Errorf("snapshot part %d: heartbeat_ms = %v, want %d", parts, m["heartbeat_ms"], httpapi.DefaultHeartbeat.Milliseconds())
			}
			for _, x := range states {
				listed[x.(map[string]any)["breaker"].(string)] = true
			}
			more, _ = m["more"].(bool)
		}
		for i := range n {
			if name := b.Breaker(fmt.Sprint("snap-", i)); !listed[name] {
				t.Errorf("the snapshot's %d parts never list %s, open", parts, name)
			}
		}
		if parts < 3 {
			t.Errorf("%d open breakers came in %d snapshot parts, want at least 3", n, parts)
		}
	})
}

// TestSecuritySnapshotCountsAsARead (N2): a stream's snapshot holds one
// of its token's read slots while it is read, so a token's streams
// opening at once are bounded by its read cap as its Lists are: with the
// token's one slot held, GET /v1/watch is 429 resource_exhausted; once
// free, the stream opens and gives the slot back after its snapshot, for
// as long as the stream stays open.
func TestSecuritySnapshotCountsAsARead(t *testing.T) {
	b := testredis.Mini(t)
	reads := limits.Gate{Cap: limits.NewPerKey(1), What: "read calls"}
	const key = `token "pool"`
	d := daemontest.StartWith(t, b, daemontest.Options{HTTP: &httpapi.Options{Watch: &httpapi.Watch{
		Reads: func(*http.Request) (func(), error) { return reads.Acquire(key) }}}})
	held, err := reads.Acquire(key)
	if err != nil {
		t.Fatal(err)
	}
	refusedWatch(t, d, "the token's read slot held")
	held()
	s := watch(t, d, nil, "", "")
	snapshotNames(t, s)
	daemontest.Eventually(t, "the read slot given back after the snapshot", func() bool { return reads.Cap.Held(key) == 0 })
}
