package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/server"
	"github.com/breakerd/breakerd/internal/store"
)

// NewLogger returns the daemon's slog logger in the configured format.
func NewLogger(c Config, w io.Writer) *slog.Logger {
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// Run serves until ctx ends, then shuts down in order: health goes
// NOT_SERVING, the drain delay passes, the gRPC server stops gracefully
// (cut after ShutdownTimeout), and Redis is closed last. ready, when
// non-nil, is called with the listening address once the daemon serves.
func Run(ctx context.Context, c Config, log *slog.Logger, ready func(net.Addr)) error {
	policies := policy.NewSet(policy.Default())
	var reloader *policyReloader
	if c.PolicyFile != "" {
		set, sum, err := readPolicy(c.PolicyFile)
		if err != nil {
			return err
		}
		policies = set
		reloader = &policyReloader{path: c.PolicyFile, log: log, last: sum}
	}
	rdb, closeRedis, err := connect(c, log)
	if err != nil {
		return err
	}
	defer closeRedis()

	lis, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", c.Listen, err)
	}
	st := store.New(rdb, store.Options{Policies: policies, EventsMaxLen: c.EventsMaxLen, EventRetention: c.EventRetention})
	hub := events.NewHub(rdb, st.Channel(), log)
	op, opts, err := newOperate(log, rdb, st, hub)
	if err != nil {
		return err
	}
	if reloader != nil {
		reloader.apply, reloader.result = st.SetPolicies, op.m.ConfigReloaded
	}
	g, hs := server.New(st, hub).NewGRPC(opts...)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hubDone := make(chan error, 1)
	hubReady := make(chan struct{})
	go func() { hubDone <- hub.Run(ctx, hubReady) }()
	// Before health can turn SERVING: SIGHUP is handled from then on.
	if err := op.start(ctx, c, log, reloader); err != nil {
		_ = lis.Close()
		return err
	}
	go watchHealth(ctx, st, hs, c.HealthInterval, log, op.m.SetDegraded)

	serveErr := make(chan error, 1)
	go func() { serveErr <- g.Serve(lis) }()
	select {
	case <-hubReady:
	case err := <-hubDone:
		g.Stop()
		return err
	case <-ctx.Done():
	}
	log.Info("breakerd serving", "addr", lis.Addr().String(), "policy_file", c.PolicyFile)
	if ready != nil {
		ready(lis.Addr())
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("breakerd shutting down", "drain_delay", c.DrainDelay)
	hs.Shutdown()
	time.Sleep(c.DrainDelay)
	stopped := make(chan struct{})
	backstop := time.AfterFunc(c.ShutdownTimeout, func() {
		log.Warn("graceful stop timed out; cutting in-flight calls")
		g.Stop()
	})
	go func() { g.GracefulStop(); close(stopped) }()
	<-stopped
	backstop.Stop()
	cancel()
	if err := <-hubDone; err != nil && !errors.Is(err, context.Canceled) {
		log.Warn("event hub ended with an error", "err", err)
	}
	log.Info("breakerd stopped")
	return nil
}

// connect opens the configured Redis, or starts an embedded one.
func connect(c Config, log *slog.Logger) (redis.UniversalClient, func(), error) {
	if c.RedisURL == "" {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			return nil, nil, fmt.Errorf("embedded redis: %w", err)
		}
		log.Warn("no --redis-url: using an embedded in-memory Redis; breaker state is neither shared with other daemons nor persisted", "embedded_addr", m.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		return rdb, func() { _ = rdb.Close(); m.Close() }, nil
	}
	opt, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("--redis-url: %w", err)
	}
	rdb := redis.NewClient(opt)
	log.Info("using redis", "addr", opt.Addr, "db", opt.DB, "tls", opt.TLSConfig != nil)
	return rdb, func() { _ = rdb.Close() }, nil
}

// watchHealth flips the health status to SERVING after Redis answers and
// every script is loaded, and back to NOT_SERVING while Redis is away.
func watchHealth(ctx context.Context, st *store.Store, hs *health.Server, every time.Duration, log *slog.Logger, degraded func(bool)) {
	serving := false
	check := func() {
		cctx, cancel := context.WithTimeout(ctx, every)
		err := st.Load(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil && !serving:
			hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
			log.Info("redis ready: health SERVING")
		case err != nil && serving:
			hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
			log.Error("redis unreachable: health NOT_SERVING", "err", err)
		}
		serving = err == nil
		degraded(!serving)
	}
	check()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			check()
		}
	}
}
