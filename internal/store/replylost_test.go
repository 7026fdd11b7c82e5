package store_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/daemon"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/replylost"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Replies lost after Redis ran the script (internal/replylost): each test loses a
// reply through a dialer (testredis.ReplyLoser) on a client with the
// daemon's retries, on every backend, and checks what Redis then holds.

// lossy is a fixture whose store talks to Redis through a ReplyLoser, and
// whose log the test reads.
type lossy struct {
	*fixture
	loser *testredis.ReplyLoser
	logs  *syncBuffer
}

// eachLossy runs fn on a lossy store on every backend, with the store's
// default (its scripts coalesced on a single Redis) and unpipelined (on a
// Cluster, which coalesces nothing, once), with a breaker name of its own
// for each.
func eachLossy(t *testing.T, fn func(t *testing.T, l *lossy, name string)) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		for _, mode := range []string{"default", "unpipelined"} {
			if mode == "unpipelined" && b.Name == "cluster" {
				continue
			}
			t.Run(mode, func(t *testing.T) { fn(t, newLossy(t, b, mode == "unpipelined"), b.Breaker("search-"+mode)) })
		}
	})
}

func newLossy(t *testing.T, b *testredis.Backend, unpipelined bool) *lossy {
	t.Helper()
	l := &lossy{loser: &testredis.ReplyLoser{}, logs: &syncBuffer{}}
	c := b.NewClientWith(t, func(o *redis.UniversalOptions) {
		o.Dialer, o.MaxRetries = l.loser.Dial, daemon.RedisRetries
	})
	st := store.New(c, store.Options{Now: b.Clock(), Rand: func() float64 { return 0 }, Channel: b.Prefix + "events",
		Unpipelined: unpipelined, Log: slog.New(slog.NewTextHandler(l.logs, nil))})
	t.Cleanup(st.Close)
	if err := st.Load(context.Background()); err != nil {
		t.Fatalf("Load: %v", err)
	}
	l.fixture = &fixture{Backend: b, t: t, st: st}
	return l
}

// lose makes the next n commands on breaker lose their replies, and
// returns a check that they all did (so that no test passes without its
// fault).
func (l *lossy) lose(breaker string, n int) func() {
	before := l.loser.Lost()
	l.loser.Arm(breaker, n)
	return func() {
		l.t.Helper()
		if got := l.loser.Lost() - before; got != int64(n) {
			l.t.Fatalf("%d replies lost, want %d: the fault never happened", got, n)
		}
	}
}

// loseAll makes every command on breaker lose its reply until the check
// it returns, which disarms the loser and checks that the first command
// and at least one resend lost theirs (a Cluster client resends more
// often than MaxRetries: it retries up to its MaxRedirects).
func (l *lossy) loseAll(breaker string) func() {
	before := l.loser.Lost()
	l.loser.Arm(breaker, 1<<20)
	return func() {
		l.t.Helper()
		l.loser.Arm(breaker, 0)
		if got := l.loser.Lost() - before; got < 1+daemon.RedisRetries {
			l.t.Fatalf("%d replies lost, want the first and its resends: the fault never happened", got)
		}
	}
}

// logged reports whether the store logged a line containing s.
func (l *lossy) logged(s string) bool { return strings.Contains(l.logs.String(), s) }

// TestLostRecordReplyCountsOnce: a failure whose Record reply is lost,
// and which go-redis therefore sends again, counts once. Four real
// failures from two workers leave a breaker of threshold 5 closed with 4.
func TestLostRecordReplyCountsOnce(t *testing.T) {
	eachLossy(t, func(t *testing.T, l *lossy, name string) {
		l.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		a := l.allow(name, "w1")
		lost := l.lose(name, 1)
		r := l.record(name, "w1", a.Ticket, pb.Outcome_OUTCOME_TIMEOUT)
		lost()
		if !r.Counted || r.Degraded || r.State.Failures != 2 {
			t.Errorf("Record after a lost reply = counted %v, degraded %v, %d failures; want counted once, from Redis, 2 failures",
				r.Counted, r.Degraded, r.State.Failures)
		}
		l.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		r = l.call(name, "w2", pb.Outcome_OUTCOME_TIMEOUT)
		if r.State.State != pb.State_STATE_CLOSED || r.State.Failures != 4 {
			t.Errorf("after 4 failures (one reply lost): %v with %d failures, want CLOSED with 4 (threshold %d)",
				r.State.State, r.State.Failures, policy.Default().Threshold)
		}
		t.Logf("figure (not asserted): 4 failures, 1 Record reply lost and resent: %v with %d failures counted",
			r.State.State, r.State.Failures)
		if !l.logged("not counted again") {
			t.Errorf("the resent Record was not logged:\n%s", l.logs)
		}
	})
}

// TestLostAllowReplyKeepsTheProbe: the Allow that takes the probe lease,
// its reply lost and the command sent again, is answered PROBE with the
// lease it took: its Record settles the probe. (Without the rule, the
// resent Allow finds the lease held and is denied for its own probe, and
// the fleet waits out the probe timeout.)
func TestLostAllowReplyKeepsTheProbe(t *testing.T) {
	eachLossy(t, func(t *testing.T, l *lossy, name string) {
		l.trip(name)
		l.Advance(policy.Default().CooldownBase)
		lost := l.lose(name, 1)
		a := l.allow(name, "w1")
		lost()
		t.Logf("figure (not asserted): 1 Allow reply lost and resent: %v", a.Decision)
		if a.Decision != pb.Decision_DECISION_PROBE || a.Degraded {
			t.Fatalf("Allow after a lost reply = %v (%s), degraded %v; want PROBE from Redis", a.Decision, a.Reason, a.Degraded)
		}
		if r := l.record(name, "w1", a.Ticket, pb.Outcome_OUTCOME_SUCCESS); !r.Counted || r.State.State != pb.State_STATE_CLOSED {
			t.Errorf("the probe's Record = counted %v, %v (%s); want counted, CLOSED", r.Counted, r.State.State, r.Note)
		}
		if !l.logged("answered as the probe it already was") {
			t.Errorf("the resent Allow was not logged:\n%s", l.logs)
		}
	})
}

// TestLostAllowReplyReleasesTheLease: when no reply comes back at all
// (the resent Allow's lost too), the lease the first one took is released
// by the daemon, and another worker's Allow probes at once, not after the
// probe timeout (which never passes here: the clock stands still).
func TestLostAllowReplyReleasesTheLease(t *testing.T) {
	eachLossy(t, func(t *testing.T, l *lossy, name string) {
		l.trip(name)
		l.Advance(policy.Default().CooldownBase)
		before := l.loser.Lost()
		lost := l.loseAll(name)
		start := time.Now()
		if a, err := l.st.Allow(context.Background(), name, "w1"); err == nil && !a.Degraded {
			t.Fatalf("Allow with every reply lost = %v, want an error or a degraded answer", a.Decision)
		}
		lost()
		failed := time.Since(start)
		other := newFixture(t, l.Backend, store.Options{}) // another daemon, on a sound connection
		var got *pb.AllowResponse
		daemontest.Eventually(t, "another worker's Allow probes", func() bool {
			got = other.allow(name, "w2")
			return got.Decision == pb.Decision_DECISION_PROBE
		})
		t.Logf("figure (not asserted): %d replies lost; the Allow failed after %v; another worker probed %v after it was sent (probe_timeout %v)",
			l.loser.Lost()-before, failed, time.Since(start), policy.Default().ProbeTimeout)
		daemontest.Eventually(t, "the release is logged", func() bool { return l.logged("the lease is released") })
		if r := other.record(name, "w2", got.Ticket, pb.Outcome_OUTCOME_SUCCESS); r.State.State != pb.State_STATE_CLOSED {
			t.Errorf("the new probe's success left %v, want CLOSED", r.State.State)
		}
	})
}

// TestRecordIdsBounded: the ids a breaker remembers for resends stay at
// most 64 however many Records come (here failures on a breaker pinned
// closed, which count and never trip), and expire a minute after the last.
func TestRecordIdsBounded(t *testing.T) {
	ctx := context.Background()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := b.Breaker("pinned")
		if _, err := f.st.Force(ctx, name, pb.ForceMode_FORCE_MODE_CLOSED, "flood", 0, "ops"); err != nil {
			t.Fatal(err)
		}
		a := f.allow(name, "w1")
		for range 3*64 + 5 {
			f.record(name, "w1", a.Ticket, pb.Outcome_OUTCOME_TIMEOUT)
		}
		key := store.KeysOf(name).Records
		n, err := b.Client.HLen(ctx, key).Result()
		if err != nil || n < 1 || n > 64 {
			t.Errorf("%s holds %d ids (%v), want 1 to 64", key, n, err)
		}
		if ttl, err := b.Client.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > time.Minute {
			t.Errorf("%s expires in %v (%v), want within a minute", key, ttl, err)
		}
	})
}

// TestWorkersRecordIDsCountOnce: a Record sent twice with the worker's
// id (RecordRequest.record_id: a client's retry) is answered as the
// first was and counted once; another worker's Record with the same id
// is its own and counts.
func TestWorkersRecordIDsCountOnce(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := b.Breaker("retried")
		id := func(r *pb.RecordRequest) { r.RecordId = "r-1" }
		a := f.allow(name, "w1")
		first := f.record(name, "w1", a.Ticket, pb.Outcome_OUTCOME_TIMEOUT, id)
		again := f.record(name, "w1", a.Ticket, pb.Outcome_OUTCOME_TIMEOUT, id)
		if !first.Counted || !again.Counted || again.State.Failures != 1 {
			t.Errorf("the same Record twice = counted %v then %v, %d failures; want counted, answered alike, 1 failure",
				first.Counted, again.Counted, again.State.Failures)
		}
		other := f.record(name, "w2", f.allow(name, "w2").Ticket, pb.Outcome_OUTCOME_TIMEOUT, id)
		if !other.Counted || other.State.Failures != 2 {
			t.Errorf("another worker's Record with the same id = counted %v, %d failures; want counted, 2 failures",
				other.Counted, other.State.Failures)
		}
	})
}

// syncBuffer is a bytes.Buffer safe for the store's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCallerThatLeftIsNoLostReply: a Record whose caller stops waiting
// while its script is out (callers a frozen daemon finds gone when it
// resumes) is still applied, on the daemon's own bound, and is not
// logged as a reply Redis lost.
func TestCallerThatLeftIsNoLostReply(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	px := testredis.NewProxy(t, b.Addr)
	logs := &syncBuffer{}
	st := store.New(b.ClientVia(t, px.Addr(), nil), store.Options{Channel: b.Prefix + "events",
		Log: slog.New(slog.NewTextHandler(logs, nil))})
	t.Cleanup(st.Close)
	if err := st.Load(context.Background()); err != nil {
		t.Fatalf("Load: %v", err)
	}
	name := b.Breaker("search")
	px.Delay(200 * time.Millisecond)
	err := recordOnceSent(t, st, name)
	if err == nil {
		t.Fatal("Record past its caller's deadline: nil error, want the deadline's")
	}
	t.Logf("the caller left with %v", err)
	daemontest.Eventually(t, "the Record to be applied after its caller left", func() bool {
		st, err := st.Get(context.Background(), name)
		return err == nil && st.GetFailures() == 1
	})
	if strings.Contains(logs.String(), "was lost") {
		t.Errorf("a caller that left was logged as a lost reply:\n%s", logs)
	}
}

// recordOnceSent records a timeout for name with a caller that waits 20
// ms, until one such Record was sent (a busy host can end those 20 ms
// before the store sends it: replylost.Unsent, nothing to apply), and
// returns its error.
func recordOnceSent(t *testing.T, st *store.Store, name string) error {
	t.Helper()
	for range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := st.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Outcome: pb.Outcome_OUTCOME_TIMEOUT, Ticket: &pb.Ticket{}})
		cancel()
		if !errors.As(err, new(replylost.Unsent)) {
			return err
		}
	}
	t.Fatal("100 Records in a row ended before the store sent them")
	return nil
}
