// Package testtls makes a throwaway PKI for tests: a CA, a server
// certificate for 127.0.0.1, a client certificate, and a client
// certificate from another CA, as PEM files and as tls values.
package testtls

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
	"testing"
	"time"
)

// PKI is one test's certificates. Files live in a temporary directory
// removed when the test ends.
type PKI struct {
	// CAFile is the CA's certificate (PEM); Pool holds it.
	CAFile string
	Pool   *x509.CertPool
	// ServerCertFile and ServerKeyFile are the server's pair for
	// 127.0.0.1; Server is the same pair, loaded.
	ServerCertFile, ServerKeyFile string
	Server                        tls.Certificate
	// ClientCertFile and ClientKeyFile are a client's pair signed by the
	// CA; Client is the same pair, loaded.
	ClientCertFile, ClientKeyFile string
	Client                        tls.Certificate
	// Other is a client certificate signed by another CA.
	Other tls.Certificate
}

// New makes a PKI valid for an hour around now.
func New(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	pair := func(ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, usage x509.ExtKeyUsage, certName, keyName string) (string, string, tls.Certificate) {
		der, key := issue(t, ca, caKey, cn, usage)
		kb, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		var c, k string
		if certName != "" {
			c, k = write(certName, "CERTIFICATE", der), write(keyName, "EC PRIVATE KEY", kb)
		}
		return c, k, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	ca, caKey := selfSigned(t, "test CA")
	other, otherKey := selfSigned(t, "other CA")
	p := &PKI{Pool: x509.NewCertPool(), CAFile: write("ca.pem", "CERTIFICATE", ca.Raw)}
	p.Pool.AddCert(ca)
	p.ServerCertFile, p.ServerKeyFile, p.Server = pair(ca, caKey, "breakerd", x509.ExtKeyUsageServerAuth, "server.pem", "server.key")
	p.ClientCertFile, p.ClientKeyFile, p.Client = pair(ca, caKey, "worker-7", x509.ExtKeyUsageClientAuth, "client.pem", "client.key")
	_, _, p.Other = pair(other, otherKey, "intruder", x509.ExtKeyUsageClientAuth, "", "")
	return p
}

func selfSigned(t testing.TB, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func issue(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}
