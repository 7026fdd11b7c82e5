package client

import (
	"context"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// BenchmarkAllowOpen compares a denial from breakerd (one RPC and one
// Redis round trip) with the same denial from the open-circuit cache.
func BenchmarkAllowOpen(b *testing.B) {
	be := testredis.Mini(b)
	d := daemontest.Start(b, be, withAlternatives())
	name := be.Breaker("payments")
	ctx := context.Background()
	if _, err := d.Store.Force(ctx, name, pb.ForceMode_FORCE_MODE_OPEN, "maintenance", 0, "ops"); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		opts []Option
	}{{"daemon", nil}, {"cached", []Option{WithOpenCache()}}} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := Dial(d.Addr, append([]Option{WithWorkerID("bench"), WithAllowBudget(testBudget)}, bc.opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if bc.opts != nil {
				for live := false; !live; live, _, _ = c.cache.status() {
					time.Sleep(time.Millisecond) // the first resync
				}
			}
			for b.Loop() {
				if p, err := c.Allow(ctx, name); err != nil || p.Allowed() {
					b.Fatalf("%+v, %v", p, err)
				}
			}
		})
	}
}
