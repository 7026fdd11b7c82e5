package bench

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestTracedDaemonExports checks the bench's traced daemon does trace:
// pairs against the daemon sampling every trace reach its span sink (an
// Allow and a Record are a server span and a script span each).
func TestTracedDaemonExports(t *testing.T) {
	addr := testredis.Mini(t).Addr
	ctx := context.Background()
	daemon, sink, stop, err := serveTracedSink(ctx, addr, ServeDaemonTraceAll)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(daemon, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		stop()
		t.Fatal(err)
	}
	tg := &target{prefix: "bench-trace-test/", traced: map[string]pb.BreakerServiceClient{ServeDaemonTraceAll: pb.NewBreakerServiceClient(conn)}}
	op, err := traceScenarios()[1].build(ctx, tg, Defaults())
	if err == nil {
		for i := 0; i < 3 && err == nil; i++ {
			err = op(ctx, 0, i)
		}
	}
	_ = conn.Close()
	stop() // the daemon flushes its spans at shutdown
	if err != nil {
		t.Fatal(err)
	}
	if got := sink.spans.Load(); got < 12 {
		t.Errorf("the sink got %d spans from 3 traced pairs, want at least 12", got)
	}
}
