package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/breakerd/breakerd/internal/cli"
)

func noEnv(string) string { return "" }

func TestChecksTheNamedService(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("breakerd.v1.BreakerService", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	addr := lis.Addr().String()
	ctx := context.Background()

	for _, tc := range []struct {
		args   []string
		env    map[string]string
		wantOK bool
		want   string
	}{
		{[]string{"healthcheck", addr}, nil, true, ""},
		{[]string{"healthcheck", "--addr", addr}, nil, true, ""},
		{[]string{"healthcheck"}, map[string]string{"BREAKERD_HEALTHCHECK_ADDR": addr}, true, ""},
		{[]string{"healthcheck", "--addr", addr, "--service", "breakerd.v1.BreakerService"}, nil, false, "NOT_SERVING"},
		{[]string{"healthcheck", "--addr", addr, "--service", "nope"}, nil, false, "NotFound"},
	} {
		err := run(ctx, tc.args, func(k string) string { return tc.env[k] }, &strings.Builder{})
		if tc.wantOK != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("run(%q, %v) = %v, want ok=%v (%q)", tc.args, tc.env, err, tc.wantOK, tc.want)
		}
		var ue *cli.UsageError
		if errors.As(err, &ue) {
			t.Errorf("run(%q) = %v: a failed check is not a usage error", tc.args, err)
		}
	}
}

func TestHelpAndUsageErrors(t *testing.T) {
	var out strings.Builder
	err := run(context.Background(), []string{"healthcheck", "--help"}, noEnv, &out)
	if !errors.Is(err, cli.ErrHelp) || cli.Exit("healthcheck", err, &strings.Builder{}) != 0 {
		t.Fatalf("--help = %v, want cli.ErrHelp (exit 0)", err)
	}
	for _, want := range []string{"--addr", "BREAKERD_HEALTHCHECK_ADDR", "--service", "BREAKERD_HEALTHCHECK_SERVICE", "--timeout", "--version"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"healthcheck", "--version"}, noEnv, &out); !errors.Is(err, cli.ErrHelp) || !strings.HasPrefix(out.String(), "healthcheck ") {
		t.Errorf("--version = %v, %q; want a version line", err, out.String())
	}
	for _, args := range [][]string{
		{"healthcheck", "--bogus"},
		{"healthcheck", "a:1", "b:2"},
		{"healthcheck", "--timeout", "0s"},
		{"healthcheck", "--timeout", "soon"},
	} {
		err := run(context.Background(), args, noEnv, &strings.Builder{})
		var stderr strings.Builder
		if code := cli.Exit("healthcheck", err, &stderr); code != 2 {
			t.Errorf("run(%q) = %v, exit %d; want a usage error, exit 2", args, err, code)
		}
	}
}
