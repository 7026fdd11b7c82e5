package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"

	"github.com/spf13/pflag"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// tlsFlags select the transport: plaintext unless --tls or a TLS file is
// given.
type tlsFlags struct {
	on         bool
	ca         string
	cert, key  string
	serverName string
}

func (f *tlsFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&f.on, "tls", false, "connect over TLS, verifying the daemon with the system's roots (or --tls-ca)")
	fs.StringVar(&f.ca, "tls-ca", "", "PEM file of the CA that signed the daemon's certificate; implies --tls (env BREAKERCTL_TLS_CA)")
	fs.StringVar(&f.cert, "tls-cert", "", "PEM client certificate, for daemons that verify clients; implies --tls (env BREAKERCTL_TLS_CERT)")
	fs.StringVar(&f.key, "tls-key", "", "PEM key of --tls-cert (env BREAKERCTL_TLS_KEY)")
	fs.StringVar(&f.serverName, "tls-server-name", "", "name to verify the daemon's certificate against (default: the host of --addr)")
}

// credentials returns the transport credentials the flags (or their
// environment variables) ask for.
func (f *tlsFlags) credentials(getenv func(string) string) (credentials.TransportCredentials, error) {
	for p, env := range map[*string]string{&f.ca: "BREAKERCTL_TLS_CA", &f.cert: "BREAKERCTL_TLS_CERT", &f.key: "BREAKERCTL_TLS_KEY"} {
		if *p == "" {
			*p = getenv(env)
		}
	}
	if !f.on && f.ca == "" && f.cert == "" && f.key == "" {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.serverName}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, usageErr("--tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usageErr("--tls-ca: %s holds no PEM certificate", f.ca)
		}
		cfg.RootCAs = pool
	}
	if (f.cert == "") != (f.key == "") {
		return nil, usageErr("--tls-cert and --tls-key: give both or neither")
	}
	if f.cert != "" {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, usageErr("--tls-cert/--tls-key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(cfg), nil
}
