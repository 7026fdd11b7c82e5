package client

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
)

// authSeen starts a daemon that keeps the authorization metadata of every
// Allow it serves ("" for none): what the wire carried.
func authSeen(t *testing.T) (addr string, seen func() []string) {
	t.Helper()
	var mu sync.Mutex
	var got []string
	keep := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if strings.HasSuffix(info.FullMethod, "/Allow") {
			md, _ := metadata.FromIncomingContext(ctx)
			mu.Lock()
			got = append(got, strings.Join(md.Get("authorization"), ","))
			mu.Unlock()
		}
		return h(ctx, req)
	})
	d := daemontest.StartWith(t, testredis.Mini(t), daemontest.Options{Server: []grpc.ServerOption{keep}})
	return d.Addr, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// TestDialReadsTheEnvironment: Dial("") dials BREAKERD_ADDR and sends
// BREAKERD_TOKEN; a target or WithToken given wins, and WithToken("")
// sends no token whatever the environment holds.
func TestDialReadsTheEnvironment(t *testing.T) {
	addr, seen := authSeen(t)
	t.Setenv(EnvAddr, addr)
	t.Setenv(EnvToken, "token-from-env")
	allow := func(target string, opts ...Option) {
		t.Helper()
		c := dial(t, target, "w-env", opts...)
		if _, err := c.Allow(context.Background(), "env:payments"); err != nil {
			t.Fatal(err)
		}
	}
	allow("")
	allow(addr, WithToken("token-given"))
	allow("", WithToken(""))
	want := []string{"Bearer token-from-env", "Bearer token-given", ""}
	if got := seen(); !slices.Equal(got, want) {
		t.Errorf("authorization at the daemon = %q, want %q", got, want)
	}
}

// TestDialWithoutTargetNamesTheVariable: no target and no BREAKERD_ADDR
// is an error naming the variable, not a dial to nowhere.
func TestDialWithoutTargetNamesTheVariable(t *testing.T) {
	t.Setenv(EnvAddr, "")
	if c, err := Dial(""); err == nil || !strings.Contains(err.Error(), EnvAddr+" is not set") {
		if c != nil {
			_ = c.Close()
		}
		t.Errorf("Dial(\"\") without %s = %v, want an error naming it", EnvAddr, err)
	}
}
