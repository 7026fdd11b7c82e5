package main

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// serving waits until the daemon at addr answers health SERVING.
func serving(t *testing.T, addr string, out *daemontest.Buffer) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	until(t, "SERVING", out, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && res.Status == healthpb.HealthCheckResponse_SERVING
	})
}

// TestSecurityConnectionFloodLeavesReloadsWorking (M2) runs breakerd with a
// file limit of 400 and floods it with 600 idle connections: past its
// connection cap (the file limit less --fd-reserve) they are closed at
// accept, so a SIGHUP reload that revokes a token still reads the tokens
// file (before the cap, the flood took every descriptor and the reload
// failed with "too many open files"), and once the flood ends the revoked
// token is refused.
func TestSecurityConnectionFloodLeavesReloadsWorking(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit (util-linux) is not installed: it sets the daemon's file limit")
	}
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	daemontest.WriteTokens(t, tokens, true)
	addr := testredis.FreeAddr(t)
	cmd, out := daemonCmd("--listen", addr, "--tokens", tokens, "--config-poll", "0", "--handshake-timeout", "10m")
	cmd.Args = append([]string{prlimit, "--nofile=400:400", "--"}, cmd.Args...)
	cmd.Path = prlimit
	p := &proc{cmd: cmd, out: out, done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	serving(t, addr, out)
	if !strings.Contains(out.String(), "--max-conns lowered to the file limit (RLIMIT_NOFILE 400) less the reserve of 256") {
		t.Errorf("the log does not say the cap was lowered:\n%s", out)
	}

	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			_ = c.Close()
		}
	}()
	for range 600 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("flood: %v", err)
		}
		flood = append(flood, c)
	}
	daemontest.WriteTokens(t, tokens, false)
	p.signal(t, syscall.SIGHUP)
	until(t, "the tokens reload", out, func() bool {
		return strings.Contains(out.String(), "tokens reloaded") || strings.Contains(out.String(), "tokens reload rejected")
	})
	if strings.Contains(out.String(), "too many open files") || !strings.Contains(out.String(), "tokens reloaded") {
		t.Fatalf("the reload during the flood failed:\n%s", out)
	}
	for _, c := range flood {
		_ = c.Close()
	}
	flood = nil
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := pb.NewBreakerServiceClient(conn)
	until(t, "the revoked token refused", out, func() bool {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+daemontest.WorkerToken), time.Second)
		defer cancel()
		_, err := api.Get(ctx, &pb.GetRequest{Breaker: "x"})
		return status.Code(err) == codes.Unauthenticated
	})
	p.stop(t)
}

// TestSecurityHeaderFloodCostsNoMemory (H1) runs breakerd, built without
// -race (this test binary re-exec'd, unless it has -race), and sends it 32 concurrent calls of 6 MiB of metadata each
// without a token: each is reset as its headers pass --max-header-bytes,
// and the daemon's peak resident memory grows by less than 64 MiB (with
// grpc-go's 16 MiB default, 224 such calls took it to 4.6 GB).
func TestSecurityHeaderFloodCostsNoMemory(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	daemontest.WriteTokens(t, tokens, true)
	addr := testredis.FreeAddr(t)
	cmd, out := daemonCmd("--listen", addr, "--tokens", tokens)
	if raceBuild { // -race's shadow memory would swamp what is measured
		cmd, out = raceFreeDaemonCmd(t, "--listen", addr, "--tokens", tokens)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	serving(t, addr, out)

	pid := cmd.Process.Pid
	before := procKB(t, pid, "VmRSS")
	var wg sync.WaitGroup
	outcomes := make(chan string, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := daemontest.RawCall(addr, "/breakerd.v1.BreakerService/List", "", 6<<20, time.Minute)
			if err != nil {
				outcomes <- err.Error()
				return
			}
			outcomes <- o.String()
		}()
	}
	wg.Wait()
	close(outcomes)
	for o := range outcomes {
		if o != "reset" {
			t.Errorf("a call with 6 MiB of metadata and no token: %s, want reset before the token check", o)
		}
	}
	peak := procKB(t, pid, "VmHWM")
	t.Logf("breakerd resident memory: %d KiB before the flood, peak %d KiB", before, peak)
	if grew := peak - before; grew > 64<<10 {
		t.Errorf("the header flood grew breakerd's peak resident memory by %d KiB (from %d), want under 65536", grew, before)
	}
	p.stop(t)
}

// raceFreeDaemonCmd is daemonCmd for a breakerd built without -race.
func raceFreeDaemonCmd(t *testing.T, args ...string) (*exec.Cmd, *daemontest.Buffer) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "breakerd")
	if b, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	cmd := exec.Command(bin, args...)
	out := &daemontest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	return cmd, out
}
