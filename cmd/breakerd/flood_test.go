package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"

	"github.com/breakerd/breakerd/internal/tests/testredis"
)

// rawCodec sends pre-encoded request bytes as they are, so the flood
// costs the test one encoding, not one per call.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)   { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error { return nil }
func (rawCodec) Name() string                    { return "proto" }

// procKB reads a field (VmRSS, VmHWM) of /proc/<pid>/status, in KiB.
func procKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// TestFloodWithoutATokenCostsNoMemory sends an unauthenticated flood
// against breakerd as its own process: 64 concurrent List calls of 3.9
// million states each (15 MB of request apiece), without a token, with an
// unknown one, and with a worker's token. Every call is refused, and the
// daemon's peak resident memory grows by less than 64 MiB over what it
// held before (before the tap and the limits, it grew by 1 GB).
func TestFloodWithoutATokenCostsNoMemory(t *testing.T) {
	const workerToken = "flood-worker-token-0123456789"
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(tokens, []byte("tokens:\n  - {name: w, role: worker, token: "+workerToken+", workers: [w]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testredis.FreeAddr(t)
	p := startDaemon(t, "--listen", addr, "--tokens", tokens)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	until(t, "SERVING", p.out, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && res.Status == healthpb.HealthCheckResponse_SERVING
	})

	// ListRequest.states, field 1, packed: 3.9 M varints of STATE_OPEN.
	const n = 3_900_000
	packed := make([]byte, n)
	for i := range packed {
		packed[i] = byte(pb.State_STATE_OPEN)
	}
	req := protowire.AppendTag(nil, 1, protowire.BytesType)
	req = protowire.AppendBytes(req, packed)

	pid := p.cmd.Process.Pid
	before := procKB(t, pid, "VmRSS")
	for _, c := range []struct {
		header string
		want   codes.Code
	}{
		{"", codes.Unauthenticated},
		{"Bearer unknown-token-0123456789abc", codes.Unauthenticated},
		{"Bearer " + workerToken, codes.ResourceExhausted},
	} {
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				if c.header != "" {
					ctx = metadata.AppendToOutgoingContext(ctx, "authorization", c.header)
				}
				var out []byte
				errs <- conn.Invoke(ctx, "/breakerd.v1.BreakerService/List", &req, &out, grpc.ForceCodec(rawCodec{}))
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if status.Code(err) != c.want {
				t.Fatalf("flood with %q: %v, want %v", c.header, err, c.want)
			}
		}
	}
	peak := procKB(t, pid, "VmHWM")
	t.Logf("breakerd resident memory: %d KiB before the flood, peak %d KiB", before, peak)
	if grew := peak - before; grew > 64<<10 {
		t.Errorf("the flood grew breakerd's peak resident memory by %d KiB (from %d), want under 65536", grew, before)
	}
	p.stop(t)
}
