package client

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// loseFirstAnswer sits in front of a daemon's Record and RecordBatch:
// the first one is applied and its answer replaced by UNAVAILABLE, as when
// the daemon's answer is lost or it gave up waiting on Redis after the
// script ran. served counts the Records the daemon applied.
type loseFirstAnswer struct{ served atomic.Int64 }

func (l *loseFirstAnswer) server() grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		switch req.(type) {
		case *pb.RecordRequest, *pb.RecordBatchRequest:
			res, err := h(ctx, req)
			if l.served.Add(1) == 1 && err == nil {
				return nil, status.Error(codes.Unavailable, "the answer was lost")
			}
			return res, err
		}
		return h(ctx, req)
	})
}

// TestARetriedRecordCountsOnce: grpc's retry policy sends a Record again
// when its first answer was UNAVAILABLE, though the daemon had applied it.
// Both attempts carry the Record's id, so the daemon counts the failure
// once: the wire shows two Records served, the breaker one failure.
func TestARetriedRecordCountsOnce(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) {
		t.Parallel()
		b := testredis.Mini(t)
		l := &loseFirstAnswer{}
		d := daemontest.StartWith(t, b, daemontest.Options{Server: []grpc.ServerOption{l.server()}})
		c := m.dial(t, d.Addr, "w")
		name := b.Breaker("search")
		if err := c.Call(context.Background(), name, func(context.Context) error { return errVendor }); err != errVendor {
			t.Fatalf("Call = %v, want the vendor's error", err)
		}
		m.settle(t, d, name, c)
		eventually(t, "the Record to be sent again", func() bool { return l.served.Load() == 2 })
		if n := failures(t, d, name); n != 1 {
			t.Fatalf("the daemon counted %d failures for one failed call sent twice, want 1", n)
		}
	})
}
