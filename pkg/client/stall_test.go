package client

import (
	"context"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// stallHeartbeat is the daemons' Watch heartbeat in the stall tests: a
// stream silent for 3 of them is dropped.
const stallHeartbeat = 50 * time.Millisecond

// stallRPCTimeout bounds the stall tests' clients' RPCs
// (WithRPCTimeout): the Allow past the stale bound asks breakerd for the
// forced breaker's due probe and waits that long on the stalled link.
const stallRPCTimeout = 250 * time.Millisecond

// stalledView starts a daemon with short heartbeats behind a proxy, a
// client dialled through it by mk, and forces forced open; it returns
// once the client has heard the force, with an operator's client that
// reaches the daemon directly.
func stalledView(t *testing.T, mk func(addr string) *Client) (b *testredis.Backend, d *daemontest.Daemon, px *testredis.Proxy, c, ops *Client, forced string) {
	t.Helper()
	b = testredis.Mini(t)
	d = daemontest.StartWith(t, b, daemontest.Options{Heartbeat: stallHeartbeat})
	px = testredis.NewProxy(t, d.Addr)
	c = mk(px.Addr())
	// Cut the stalled link before the client closes (cleanups run last
	// first): Close's best-effort flushes then fail at once instead of
	// each waiting out its record timeout on a link that never answers.
	t.Cleanup(px.Cut)
	ops = dial(t, d.Addr, "ops")
	forced = b.Breaker("forced")
	ctx := context.Background()
	if _, err := ops.API().Force(ctx, &pb.ForceRequest{Breaker: forced, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "drill", Operator: "ops"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the client to deny "+forced+" with no round trip", func() bool {
		p, err := c.Allow(ctx, forced)
		return err == nil && p.Cached && p.Decision == pb.Decision_DECISION_DENIED_FORCED_OPEN
	})
	return b, d, px, c, ops, forced
}

// liftDuringStall stalls the proxy, waits for the client to drop its
// stream (live reads it), lifts the force through the daemon directly,
// and checks that the client's answer from what it held is degraded once
// the stream has been silent past its limit and gone past the stale
// bound (the client's clock moved).
func liftDuringStall(t *testing.T, px *testredis.Proxy, c, ops *Client, clk *fakeClock, forced string, live func() bool) {
	t.Helper()
	ctx := context.Background()
	px.Stall()
	eventually(t, "the client to drop its silent stream", func() bool { return !live() })
	if _, err := ops.API().Force(ctx, &pb.ForceRequest{Breaker: forced, Mode: pb.ForceMode_FORCE_MODE_AUTO, Reason: "fixed", Operator: "ops"}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(missedHeartbeats*stallHeartbeat + time.Millisecond)
	p, err := c.Allow(ctx, forced)
	if err != nil || p.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN || !p.Degraded {
		t.Fatalf("Allow(%s) from a view no longer heard = %+v, %v; want its denial marked Degraded", forced, p, err)
	}
	clk.Advance(DefaultStaleViewBound)
	p, err = c.Allow(ctx, forced)
	if err != nil || p.Cached || p.Decision == pb.Decision_DECISION_DENIED_FORCED_OPEN && !p.Degraded {
		t.Fatalf("Allow(%s) past the stale bound = %+v, %v; want an answer not from the stale view", forced, p, err)
	}
}

// TestStalledWatchDegradesTheFastView: a Watch stream that stalls (TCP up,
// nothing forwarded) is dropped after 3 missed heartbeats; the view's
// denial of a force lifted meanwhile is then Degraded and, past the stale
// bound, no longer answered; and a breaker this client sees failing
// during the stall is denied after the local threshold (counted at the
// vendor), not allowed from the stale view indefinitely.
func TestStalledWatchDegradesTheFastView(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	b, d, px, c, ops, forced := stalledView(t, func(addr string) *Client {
		return fastDial(t, addr, "fast", clk, WithAllowBudget(DefaultAllowBudget), WithRPCTimeout(stallRPCTimeout))
	})
	ctx := context.Background()
	tripped := b.Breaker("tripped")
	if p, err := c.Allow(ctx, tripped); err != nil || p.Decision != pb.Decision_DECISION_ALLOWED {
		t.Fatalf("Allow(%s) = %+v, %v; want ALLOWED", tripped, p, err)
	}
	known(t, d, c, tripped)
	liftDuringStall(t, px, c, ops, clk, forced, func() bool { return c.Stats().ViewLive })

	v := newVendor(t, 503)
	threshold := LocalPolicy{}.withDefaults().Threshold
	for i := range threshold + 1 {
		err := c.Call(ctx, tripped, v.call)
		if i < threshold {
			continue
		}
		if dn, ok := AsDenial(err, tripped); !ok || !dn.Degraded {
			t.Fatalf("call %d at %s failing during the stall: %v; want a denial by the local breaker", i+1, tripped, err)
		}
	}
	if n := v.hits.Load(); n != int64(threshold) {
		t.Errorf("%d calls reached the failing vendor during the stall, want %d (the local threshold)", n, threshold)
	}
}

// TestStalledWatchDegradesTheOpenCache: the open cache, like the fast
// view, drops a stream that misses its heartbeats, marks what it holds
// Degraded past the silence and stops answering from it past the stale
// bound.
func TestStalledWatchDegradesTheOpenCache(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	_, _, px, c, ops, forced := stalledView(t, func(addr string) *Client {
		c := dial(t, addr, "cached", WithOpenCache(), WithClock(clk), WithAllowBudget(DefaultAllowBudget), WithRPCTimeout(stallRPCTimeout))
		eventually(t, "the open cache is live", func() bool { live, _, _ := c.cache.status(); return live })
		return c
	})
	liftDuringStall(t, px, c, ops, clk, forced, func() bool { live, _, _ := c.cache.status(); return live })
}
