package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func TestTokenFile(t *testing.T) {
	t.Parallel()
	g := &gate{}
	srv := grpc.NewServer()
	pb.RegisterBreakerServiceServer(srv, g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()
	dir := t.TempDir()
	file := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	op := file("op", "operator-token\n", 0o600)
	open := file("open", "operator-token\n", 0o644)
	writable := file("writable", "operator-token\n", 0o666)
	for _, tc := range []struct {
		env      map[string]string
		args     []string
		code     int
		want     string
		wantAuth string
	}{
		{nil, []string{"--token-file", op}, 0, "no breakers hold state", "Bearer operator-token"},
		{map[string]string{"BREAKERCTL_TOKEN_FILE": op, "BREAKERCTL_TOKEN": "worker-token"}, nil, 0, "no breakers hold state", "Bearer operator-token"},
		{map[string]string{"BREAKERCTL_TOKEN_FILE": op}, []string{"--token", "worker-token"}, exitDenied, "permission denied", "Bearer worker-token"},
		{nil, []string{"--token-file", open}, 0, "readable by every local user", "Bearer operator-token"},
		{nil, []string{"--token-file", writable}, exitUsage, "writable by group or others", ""},
		{nil, []string{"--token-file", op, "--token", "x"}, exitUsage, "not both", ""},
	} {
		g.mu.Lock()
		g.auth = nil
		g.mu.Unlock()
		r := ctl(t, tc.env, append([]string{"list", "--addr", addr}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("list with env %v args %v: exit %d, out %q, err %q; want exit %d and %q", tc.env, tc.args, r.code, r.stdout, r.stderr, tc.code, tc.want)
		}
		if strings.Contains(r.stdout+r.stderr, "operator-token") {
			t.Errorf("breakerctl printed the token: %q %q", r.stdout, r.stderr)
		}
		g.mu.Lock()
		got := strings.Join(g.auth, "|")
		g.mu.Unlock()
		if got != tc.wantAuth {
			t.Errorf("list with env %v args %v: authorization %q, want %q", tc.env, tc.args, got, tc.wantAuth)
		}
	}
}
