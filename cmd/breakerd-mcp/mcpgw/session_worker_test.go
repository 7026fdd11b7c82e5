package mcpgw

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestSecuritySessionGatewayIsOneWorker: a gateway with worker_id:
// session needs a token bound to its one worker id (no "<id>/*" glob, with
// which the token's holder could act as any number of workers), and its
// sessions' failures count as one worker's: five failures from two
// sessions do not trip a min_workers 2 breaker. N5.
func TestSecuritySessionGatewayIsOneWorker(t *testing.T) {
	t.Parallel()
	const token = "session-gateway-token-0123456789"
	tokens, err := auth.Parse([]byte("tokens:\n  - name: gw\n    role: worker\n    token: " + token + "\n    workers: [gw-1]\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := testredis.Mini(t)
	d := daemontest.StartWith(t, b, daemontest.Options{Store: noJitter(), Server: auth.New(tokens).ServerOptions()})
	conn, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(client.TokenCredentials(token)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	st := failFromTwoSessions(t, b, conn, d, WorkerSession)
	if st.GetFailures() != 5 || st.GetState() != pb.State_STATE_CLOSED || st.GetSuspectWorker() != "gw-1" {
		t.Errorf("after 5 failures from two sessions: %d failures, %v, suspect %q; want 5, closed, suspect gw-1",
			st.GetFailures(), st.GetState(), st.GetSuspectWorker())
	}
}
