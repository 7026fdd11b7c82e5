// Package daemontest starts in-process breakerd daemons for tests: each has
// its own Redis connection, store and gRPC listener on loopback, as a
// separate daemon process would, and shares the test's backend and clock.
package daemontest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/hooks"
	"github.com/breakerd/breakerd/internal/httpapi"
	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/server"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
)

// Daemon is one running in-process daemon.
type Daemon struct {
	// Addr is its gRPC address.
	Addr string
	// HTTPAddr is its HTTP/JSON address ("host:port"), when started with
	// Options.HTTP.
	HTTPAddr string
	// Store is its store (for inspecting state the way the daemon sees it).
	Store *store.Store
	// Calls counts the RPCs it has served, by full method name.
	Calls *Counter

	stop sync.Once
	halt func()
}

// Stop stops the daemon now, cutting its open streams and leaving webhook
// deliveries in progress pending, unacknowledged, as a crashed or
// partitioned daemon would; it is also called when the test ends. Safe to
// call more than once.
func (d *Daemon) Stop() { d.stop.Do(d.halt) }

// Options start a daemon with more than a store's options.
type Options struct {
	// Store configures its store (see Start).
	Store store.Options
	// Addr is the address to listen on. Default: a free loopback port
	// below the ephemeral range (testredis.Listen).
	Addr string
	// Server are extra gRPC server options: auth interceptors,
	// grpc.Creds for TLS.
	Server []grpc.ServerOption
	// Hooks, when set, run a webhook dispatcher with these options; its
	// Channel defaults to the store's, its Log to discard.
	Hooks *hooks.Options
	// Limits are the server's per-token quotas. Default: none.
	Limits server.Limits
	// Listener are the listener limits (internal/limits). Default: each
	// at its default.
	Listener limits.Listener
	// Watch caps the hub's Watch streams. Default: none.
	Watch events.Limits
	// HTTP, when set, serves the HTTP/JSON API too (on loopback, at
	// Daemon.HTTPAddr) with these options; its GRPC and Health are the
	// daemon's, MaxBodyBytes defaults to 512 KiB, a Watch (any, even
	// empty) gets the daemon's hub and store. Give Auth's
	// ServerOptions in Server as well, as breakerd does.
	HTTP *httpapi.Options
	// Heartbeat is how often an idle gRPC Watch stream sends a heartbeat
	// (server.WithHeartbeat). Default httpapi.DefaultHeartbeat.
	Heartbeat time.Duration
	// HTTPTranscodeOnly serves every RPC over HTTP through the transcoder,
	// none in process (httpapi.Options.Local nil): the reference the
	// in-process calls are held to.
	HTTPTranscodeOnly bool
}

// Start runs a daemon on b until t ends. o.Now defaults to b's clock,
// and o.Channel and o.SavingsKey to ones unique to b, so that daemons
// started on the same backend share events and nothing else does.
func Start(t testing.TB, b *testredis.Backend, o store.Options) *Daemon {
	t.Helper()
	return StartWith(t, b, Options{Store: o})
}

// StartAt is Start listening on addr: a stopped daemon's Addr starts a
// replacement that clients already dialled to it reconnect to.
func StartAt(t testing.TB, b *testredis.Backend, o store.Options, addr string) *Daemon {
	t.Helper()
	return StartWith(t, b, Options{Store: o, Addr: addr})
}

// StartWith is Start with auth, TLS, hooks or an address.
func StartWith(t testing.TB, b *testredis.Backend, opts Options) *Daemon {
	t.Helper()
	o := opts.Store
	if o.Now == nil {
		o.Now = b.Clock()
	}
	if o.Channel == "" {
		o.Channel = b.Prefix + "events"
	}
	if o.SavingsKey == "" {
		o.SavingsKey = b.Prefix + "saved"
	}
	rdb := b.NewClient(t)
	st := store.New(rdb, o)
	if err := st.Load(context.Background()); err != nil {
		t.Fatalf("daemontest: load scripts: %v", err)
	}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	hub := events.NewHub(rdb, st.Channel(), discard)
	hub.SetLimits(opts.Watch)
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	stopHub, err := hub.Start(sctx)
	scancel()
	if err != nil {
		t.Fatalf("daemontest: event hub: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hooksDone := make(chan error, 1)
	if err := startHooks(ctx, opts.Hooks, rdb, st, hub, discard, hooksDone); err != nil {
		cancel()
		stopHub()
		t.Fatalf("daemontest: hooks: %v", err)
	}
	calls := NewCounter()
	srv := server.New(st, hub).WithLimits(opts.Limits).WithListener(opts.Listener).WithHeartbeat(opts.Heartbeat)
	hub.SetStateReader(srv.State)
	g, hs := srv.NewGRPC(append(calls.Options(), opts.Server...)...)
	server.SetServing(hs, true)
	lis, err := listen(t, opts.Addr)
	if err != nil {
		cancel()
		stopHub()
		<-hooksDone
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	d := &Daemon{Addr: lis.Addr().String(), Store: st, Calls: calls}
	stopHTTP := func() {}
	if opts.HTTP != nil {
		ho := *opts.HTTP
		if !opts.HTTPTranscodeOnly {
			ho.Local = srv.InProcess()
		}
		d.HTTPAddr, stopHTTP = serveHTTP(t, ho, g, hs, srv, st, hub)
	}
	d.halt = func() {
		cancel()
		stopHTTP()
		g.Stop()
		stopHub()
		<-hooksDone
	}
	t.Cleanup(d.Stop)
	return d
}

// startHooks runs a dispatcher of o's hooks (none when o is nil) until
// ctx ends, fed by hub, and returns once it is ready; done receives its
// end (at once when there are no hooks).
func startHooks(ctx context.Context, o *hooks.Options, rdb redis.UniversalClient, st *store.Store, hub *events.Hub, log *slog.Logger, done chan<- error) error {
	if o == nil {
		done <- nil
		return nil
	}
	ho := *o
	if ho.Log == nil {
		ho.Log = log
	}
	ho.Feed = hub
	d, err := hooks.New(rdb, st, ho)
	if err != nil {
		return err
	}
	ready, ended := make(chan struct{}), make(chan error, 1)
	go func() { err := d.Run(ctx, ready); ended <- err; done <- err }()
	select {
	case <-ready:
		return nil
	case err := <-ended:
		return err
	}
}

// serveHTTP serves the HTTP/JSON API over g on a loopback port; it
// returns the address and the stop that cuts its connections.
func serveHTTP(t testing.TB, o httpapi.Options, g *grpc.Server, hs *health.Server, srv *server.Server, st *store.Store, hub *events.Hub) (string, func()) {
	t.Helper()
	o.GRPC, o.Health = g, hs
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 512 << 10
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Watch != nil {
		w := *o.Watch
		w.Hub, w.Store, w.WithParents = hub, st, srv.WithParents
		o.Watch = &w
	}
	h, err := httpapi.New(o)
	if err != nil {
		t.Fatalf("daemontest: http: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hsrv := &http.Server{Handler: h, MaxHeaderBytes: 64 << 10}
	go func() { _ = hsrv.Serve(lis) }()
	return lis.Addr().String(), func() { _ = hsrv.Close() }
}

// listen listens on addr, or on testredis.Listen's port when addr is "":
// a port that a daemon stopped and started again at its Addr (StartAt)
// can take back.
func listen(t testing.TB, addr string) (net.Listener, error) {
	if addr == "" {
		return testredis.Listen(t), nil
	}
	return net.Listen("tcp", addr)
}
