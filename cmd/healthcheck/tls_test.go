package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/tests/testtls"
)

// serve runs a health service, SERVING, with opts; it returns the address.
func serve(t *testing.T, opts ...grpc.ServerOption) string {
	t.Helper()
	g := grpc.NewServer(opts...)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// checkEnv checks addr once with the transport breakerd's environment
// (getenv) gives.
func checkEnv(addr string, getenv func(string) string) error {
	creds, err := transport(getenv)
	if err != nil {
		return err
	}
	// A long bound: a busy host's TLS handshake can take seconds, and a
	// refusal fails fast whatever the bound.
	return check(context.Background(), config{Addr: addr, Timeout: 30 * time.Second}, creds)
}

func TestCheckSpeaksAsTheDaemonListens(t *testing.T) {
	p := testtls.New(t)
	other := testtls.New(t)
	plain := serve(t)
	if err := checkEnv(plain, env(nil)); err != nil {
		t.Errorf("plaintext: %v", err)
	}
	tlsCfg, err := auth.ServerTLS(p.ServerCertFile, p.ServerKeyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	withTLS := serve(t, grpc.Creds(credentials.NewTLS(tlsCfg)))
	own := map[string]string{"BREAKERD_TLS_CERT": p.ServerCertFile, "BREAKERD_TLS_KEY": p.ServerKeyFile}
	if err := checkEnv(withTLS, env(own)); err != nil {
		t.Errorf("TLS with the daemon's own certificate: %v", err)
	}
	if err := checkEnv(withTLS, env(nil)); err == nil {
		t.Errorf("plaintext to a TLS listener succeeded")
	}
	if err := checkEnv(withTLS, env(map[string]string{"BREAKERD_TLS_CERT": other.ServerCertFile, "BREAKERD_TLS_KEY": other.ServerKeyFile})); err == nil || !strings.Contains(err.Error(), "not BREAKERD_TLS_CERT's") {
		t.Errorf("a server with another certificate: %v, want the pin to refuse it", err)
	}

	mtlsCfg, err := auth.ServerTLS(p.ServerCertFile, p.ServerKeyFile, p.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	mtls := serve(t, grpc.Creds(credentials.NewTLS(mtlsCfg)))
	withClient := map[string]string{"BREAKERD_TLS_CERT": p.ServerCertFile, "BREAKERD_TLS_KEY": p.ServerKeyFile,
		"BREAKERD_TLS_CLIENT_CA": p.CAFile, "BREAKERD_HEALTHCHECK_CERT": p.ClientCertFile, "BREAKERD_HEALTHCHECK_KEY": p.ClientKeyFile}
	if err := checkEnv(mtls, env(withClient)); err != nil {
		t.Errorf("client certificates required, with the healthcheck's own: %v", err)
	}
	if err := checkEnv(mtls, env(own)); err == nil {
		t.Errorf("client certificates required, with none: succeeded")
	}
}
