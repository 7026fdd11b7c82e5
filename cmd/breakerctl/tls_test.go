package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// pki is a throwaway CA with a server certificate for 127.0.0.1 and a
// client certificate, written as PEM files.
type pki struct {
	dir                  string
	pool                 *x509.CertPool
	server               tls.Certificate
	ca, cert, key, other string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	p := &pki{dir: dir, pool: x509.NewCertPool()}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p.pool.AddCert(ca)
	issue := func(serial int64, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	p.ca = write("ca.pem", "CERTIFICATE", caDER)
	srvDER, srvKey := issue(2, x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	p.server, err = tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER(srvKey)}))
	if err != nil {
		t.Fatal(err)
	}
	cliDER, cliKey := issue(3, x509.ExtKeyUsageClientAuth, nil)
	p.cert = write("client.pem", "CERTIFICATE", cliDER)
	p.key = write("client-key.pem", "EC PRIVATE KEY", keyDER(cliKey))
	p.other = write("not-a-cert.pem", "NOTHING", []byte("x"))
	return p
}

func TestTLSWithCAAndClientCertificate(t *testing.T) {
	p := newPKI(t)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{p.server},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.pool, MinVersion: tls.VersionTLS12})))
	pb.RegisterBreakerServiceServer(srv, &gate{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()
	tok := map[string]string{"BREAKERCTL_TOKEN": "operator-token"}
	withEnv := map[string]string{"BREAKERCTL_TOKEN": "operator-token", "BREAKERCTL_TLS_CA": p.ca,
		"BREAKERCTL_TLS_CERT": p.cert, "BREAKERCTL_TLS_KEY": p.key}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		code int
		want string
	}{
		{tok, []string{"--tls-ca", p.ca, "--tls-cert", p.cert, "--tls-key", p.key}, 0, "no breakers hold state"},
		{withEnv, nil, 0, "no breakers hold state"},
		{tok, nil, exitUnreachable, "cannot reach breakerd"},                                               // plaintext to a TLS daemon
		{tok, []string{"--tls", "--tls-cert", p.cert, "--tls-key", p.key}, exitUnreachable, "certificate"}, // system roots do not know the CA
		{tok, []string{"--tls-ca", p.other}, exitUsage, "--tls-ca: " + p.other + " holds no PEM certificate"},
		{tok, []string{"--tls-ca", p.ca, "--tls-cert", p.cert}, exitUsage, "--tls-cert and --tls-key: give both or neither"},
	} {
		r := ctl(t, tc.env, append([]string{"list", "--addr", addr, "--timeout", "5s"}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("list %v: exit %d, out %q, err %q; want exit %d and %q", tc.args, r.code, r.stdout, r.stderr, tc.code, tc.want)
		}
	}
	// No client certificate: the daemon's TLS alert usually arrives and
	// reads as a refusal (exit 4); when the server closes first the client
	// sees only a broken pipe, which it cannot tell from a network fault.
	r := ctl(t, tok, "list", "--addr", addr, "--timeout", "5s", "--tls-ca", p.ca)
	refused := r.code == exitDenied && strings.Contains(r.stderr, "refused the client certificate")
	if !refused && r.code != exitUnreachable {
		t.Errorf("list without a client certificate: exit %d, err %q; want exit 4 (refused) or 5", r.code, r.stderr)
	}
}
