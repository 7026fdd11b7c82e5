package daemon

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/hooks"
	"github.com/breakerd/breakerd/internal/store"
)

// trustOptions returns the gRPC server options for TLS and bearer tokens,
// and logs what the listener accepts.
func trustOptions(c Config, log *slog.Logger) ([]grpc.ServerOption, error) {
	var opts []grpc.ServerOption
	if c.TLSCert != "" {
		cfg, err := auth.ServerTLS(c.TLSCert, c.TLSKey, c.TLSClientCA)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
		log.Info("tls on", "client_certificates_required", c.TLSClientCA != "")
	} else {
		log.Warn("no --tls-cert: the gRPC listener is plaintext")
	}
	if c.TokensFile == "" {
		if auth.IsLoopback(c.Listen) {
			log.Warn("no --tokens: auth is off, so the daemon listens on loopback only", "listen", c.Listen)
		} else {
			log.Warn("no --tokens and --insecure-listen-any: auth is off on a non-loopback address; anyone who reaches it may force breakers", "listen", c.Listen)
		}
		return opts, nil
	}
	tokens, err := auth.Load(c.TokensFile)
	if err != nil {
		return nil, err
	}
	log.Info("auth on: bearer tokens required (health and reflection stay open)", "tokens_file", c.TokensFile, "tokens", tokens.Len())
	return append(opts, auth.New(tokens).ServerOptions()...), nil
}

// newDispatcher loads the hooks file, if any. Its counters are not
// registered here: the metrics registry is the daemon's to pass in
// hooks.Options.Registerer.
func newDispatcher(c Config, rdb redis.UniversalClient, st *store.Store, reg prometheus.Registerer, log *slog.Logger) (*hooks.Dispatcher, error) {
	if c.HooksFile == "" {
		return nil, nil
	}
	hs, err := hooks.Load(c.HooksFile, os.Getenv)
	if err != nil {
		return nil, err
	}
	log.Info("alert hooks on", "hooks_file", c.HooksFile, "hooks", len(hs))
	return hooks.New(rdb, st, hooks.Options{Hooks: hs, Log: log, Registerer: reg})
}

// runDispatcher runs d until ctx ends, restarting it after a failure (Redis
// away at start) with a pause; nil d waits for ctx.
func runDispatcher(ctx context.Context, d *hooks.Dispatcher, log *slog.Logger) error {
	if d == nil {
		<-ctx.Done()
		return nil
	}
	for {
		err := d.Run(ctx, nil)
		if ctx.Err() != nil {
			return nil
		}
		log.Error("alert hooks stopped; restarting in 5s", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Second):
		}
	}
}
