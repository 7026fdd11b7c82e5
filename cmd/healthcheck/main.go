// Command healthcheck asks a gRPC server's grpc.health.v1 service whether
// it is SERVING and exits 0 if so, 1 otherwise. The container image uses it
// as its HEALTHCHECK (distroless images have no shell or curl).
//
// It reads breakerd's own environment, so it speaks as the daemon listens:
// with BREAKERD_TLS_CERT set it speaks TLS and accepts only that very
// certificate (the daemon's own, pinned: the check dials 127.0.0.1, which a
// certificate for the service's name need not cover). With
// BREAKERD_TLS_CLIENT_CA set it presents a client certificate:
// BREAKERD_HEALTHCHECK_CERT and BREAKERD_HEALTHCHECK_KEY, or else the
// daemon's own pair (which then needs the clientAuth usage too).
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	addr := "127.0.0.1:7070"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	if err := check(addr, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		os.Exit(1)
	}
}

// transport returns plaintext, or TLS pinned to the daemon's certificate
// when getenv("BREAKERD_TLS_CERT") names one.
func transport(getenv func(string) string) (credentials.TransportCredentials, error) {
	certFile, keyFile := getenv("BREAKERD_TLS_CERT"), getenv("BREAKERD_TLS_KEY")
	if certFile == "" {
		return insecure.NewCredentials(), nil
	}
	own, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("BREAKERD_TLS_CERT/BREAKERD_TLS_KEY: %w", err)
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verification is the pin below: the peer must present exactly
		// the daemon's own leaf certificate.
		InsecureSkipVerify: true, //nolint:gosec // pinned in VerifyPeerCertificate
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], own.Certificate[0]) {
				return errors.New("the server's certificate is not BREAKERD_TLS_CERT's")
			}
			return nil
		},
	}
	if getenv("BREAKERD_TLS_CLIENT_CA") != "" {
		client := own
		if c, k := getenv("BREAKERD_HEALTHCHECK_CERT"), getenv("BREAKERD_HEALTHCHECK_KEY"); c != "" {
			if client, err = tls.LoadX509KeyPair(c, k); err != nil {
				return nil, fmt.Errorf("BREAKERD_HEALTHCHECK_CERT/BREAKERD_HEALTHCHECK_KEY: %w", err)
			}
		}
		cfg.Certificates = []tls.Certificate{client}
	}
	return credentials.NewTLS(cfg), nil
}

func check(addr string, getenv func(string) string) error {
	creds, err := transport(getenv)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if res.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%s is %s", addr, res.Status)
	}
	return nil
}
