package main

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/breakerd/breakerd/internal/tests/testtls"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func TestTLSWithCAAndClientCertificate(t *testing.T) {
	t.Parallel()
	p := testtls.New(t)
	notACert := filepath.Join(t.TempDir(), "not-a-cert.pem")
	if err := os.WriteFile(notACert, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{p.Server},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.Pool, MinVersion: tls.VersionTLS12})))
	pb.RegisterBreakerServiceServer(srv, &gate{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()
	// Each case ends on its own answer (a handshake's failure comes as soon
	// as the handshake runs); the timeout is only a bound, wide enough that
	// a busy machine's slow handshake is not read as an unreachable daemon.
	const bound = "2m"
	tok := map[string]string{"BREAKERCTL_TOKEN": "operator-token"}
	withEnv := map[string]string{"BREAKERCTL_TOKEN": "operator-token", "BREAKERCTL_TLS_CA": p.CAFile,
		"BREAKERCTL_TLS_CERT": p.ClientCertFile, "BREAKERCTL_TLS_KEY": p.ClientKeyFile}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		code int
		want string
	}{
		{tok, []string{"--tls-ca", p.CAFile, "--tls-cert", p.ClientCertFile, "--tls-key", p.ClientKeyFile}, 0, "no breakers hold state"},
		{withEnv, nil, 0, "no breakers hold state"},
		{tok, nil, exitUnreachable, "cannot reach breakerd"},                                                                   // plaintext to a TLS daemon
		{tok, []string{"--tls", "--tls-cert", p.ClientCertFile, "--tls-key", p.ClientKeyFile}, exitUnreachable, "certificate"}, // system roots do not know the CA
		{tok, []string{"--tls-ca", notACert}, exitUsage, "--tls-ca: " + notACert + " holds no PEM certificate"},
		{tok, []string{"--tls-ca", p.CAFile, "--tls-cert", p.ClientCertFile}, exitUsage, "--tls-cert and --tls-key: give both or neither"},
	} {
		r := ctl(t, tc.env, append([]string{"list", "--addr", addr, "--timeout", bound}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("list %v: exit %d, out %q, err %q; want exit %d and %q", tc.args, r.code, r.stdout, r.stderr, tc.code, tc.want)
		}
	}
	// No client certificate: the daemon's TLS alert usually arrives and
	// reads as a refusal (exit 4); when the server closes first the client
	// sees only a broken pipe, which it cannot tell from a network fault.
	r := ctl(t, tok, "list", "--addr", addr, "--timeout", bound, "--tls-ca", p.CAFile)
	refused := r.code == exitDenied && strings.Contains(r.stderr, "refused the client certificate")
	if !refused && r.code != exitUnreachable {
		t.Errorf("list without a client certificate: exit %d, err %q; want exit 4 (refused) or 5", r.code, r.stderr)
	}
}
