package daemon

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/hooks"
	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/secretfile"
	"github.com/breakerd/breakerd/internal/store"
)

// trustOptions returns the gRPC server options for TLS and bearer tokens,
// and logs what the listener accepts. With a tokens file it also returns
// the authenticator (the HTTP listener checks tokens with it too) and the
// reloader that swaps the tokens in force (SIGHUP, or a change of the
// file); otherwise those are nil.
func trustOptions(c Config, log *slog.Logger) ([]grpc.ServerOption, *auth.Authenticator, *fileReloader, error) {
	var opts []grpc.ServerOption
	if c.TLSCert != "" {
		cfg, err := auth.ServerTLS(c.TLSCert, c.TLSKey, c.TLSClientCA)
		if err != nil {
			return nil, nil, nil, err
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
		return opts, nil, nil, nil
	}
	warn := &readableWarning{flag: "--tokens", log: log}
	tokens, sum, err := readTokens(c.TokensFile, warn)
	if err != nil {
		return nil, nil, nil, err
	}
	a := auth.New(tokens)
	log.Info("auth on: bearer tokens required (health and reflection stay open)", "tokens_file", c.TokensFile, "tokens", tokens.Len())
	r := &fileReloader{what: "tokens", path: c.TokensFile, last: sum, log: log, result: func(error) {},
		read: func(path string) (func(), [sha256.Size]byte, error) {
			t, sum, err := readTokens(path, warn)
			if err != nil {
				return nil, sum, err
			}
			return func() { a.Set(t) }, sum, nil
		}}
	return append(opts, a.ServerOptions()...), a, r, nil
}

// readTokens loads a tokens file, warning (warn) when other users may read
// it, and returns it with the SHA-256 of its bytes (zero when unreadable).
func readTokens(path string, warn *readableWarning) (*auth.Tokens, [sha256.Size]byte, error) {
	b, worldReadable, err := secretfile.Read(path)
	if err != nil {
		return nil, [sha256.Size]byte{}, fmt.Errorf("auth: %w", err)
	}
	sum := sha256.Sum256(b)
	warn.note(path, worldReadable)
	t, err := auth.Parse(b)
	if err != nil {
		return nil, sum, fmt.Errorf("auth: %s: %w", path, err)
	}
	return t, sum, nil
}

// readHooks loads a hooks file, warning (warn) when other users may read
// it (webhook secrets), and returns it with the SHA-256 of its bytes.
func readHooks(path string, warn *readableWarning) ([]hooks.Hook, [sha256.Size]byte, error) {
	b, worldReadable, err := secretfile.Read(path)
	if err != nil {
		return nil, [sha256.Size]byte{}, fmt.Errorf("hooks: %w", err)
	}
	sum := sha256.Sum256(b)
	warn.note(path, worldReadable)
	hs, err := hooks.Parse(b, os.Getenv)
	if err != nil {
		return nil, sum, fmt.Errorf("hooks: %s: %w", path, err)
	}
	return hs, sum, nil
}

// warnReadable logs a secrets file that every local user may read.
func warnReadable(log *slog.Logger, flag, path string, worldReadable bool) {
	if worldReadable {
		log.Warn(flag+" file is readable by every local user; chmod o-r it", "file", path)
	}
}

// readableWarning warns that a reloaded secrets file is readable by every
// local user once per change of its mode that makes it so: its reloader
// reads it on every poll, and a warning repeated each time says nothing
// new. The reload goroutine (and setup, before it starts) calls note.
type readableWarning struct {
	flag string
	log  *slog.Logger
	// readable is what the last read found.
	readable bool
}

// note is told whether the file at path was found readable by others.
func (w *readableWarning) note(path string, worldReadable bool) {
	if worldReadable && !w.readable {
		warnReadable(w.log, w.flag, path, true)
	}
	w.readable = worldReadable
}

// newDispatcher loads the hooks file, if any, and returns the dispatcher
// with the reloader that swaps it for one over the file's new hooks
// (through runner). Its counters are not registered here: the metrics
// registry is the daemon's to pass in hooks.Options.Registerer.
func newDispatcher(c Config, rdb redis.UniversalClient, st *store.Store, hub *events.Hub, reg prometheus.Registerer, log *slog.Logger) (*hookRunner, *fileReloader, error) {
	runner := &hookRunner{next: make(chan *hooks.Dispatcher, 1), log: log}
	if c.HooksFile == "" {
		return runner, nil, nil
	}
	warn := &readableWarning{flag: "--hooks", log: log}
	hs, sum, err := readHooks(c.HooksFile, warn)
	if err != nil {
		return nil, nil, err
	}
	log.Info("alert hooks on", "hooks_file", c.HooksFile, "hooks", len(hs))
	d, err := hooks.New(rdb, st, hooks.Options{Hooks: hs, Feed: hub, Log: log, Registerer: reg})
	if err != nil {
		return nil, nil, err
	}
	runner.set(d)
	r := &fileReloader{what: "hooks", path: c.HooksFile, last: sum, log: log, result: func(error) {},
		read: func(path string) (func(), [sha256.Size]byte, error) {
			hs, sum, err := readHooks(path, warn)
			if err != nil {
				return nil, sum, err
			}
			next, err := d.WithHooks(hs)
			if err != nil {
				return nil, sum, err
			}
			return func() { runner.set(next) }, sum, nil
		}}
	return runner, r, nil
}

// hookRunner runs the dispatcher in force and swaps it for the next one a
// reload hands it (set).
type hookRunner struct {
	// next holds the dispatcher to run next; set replaces what it holds.
	// Only the reload goroutine (and setup, before it starts) calls set.
	next chan *hooks.Dispatcher
	log  *slog.Logger
}

// set makes d the dispatcher to run, replacing one not yet started.
func (r *hookRunner) set(d *hooks.Dispatcher) {
	select {
	case <-r.next:
	default:
	}
	r.next <- d
}

// run runs the dispatcher in force until ctx ends, restarting it after a
// failure (Redis away at start) with a pause, and stopping it for the
// next one a reload sets. With no dispatcher it waits. ready is closed
// once the first dispatcher has marked where its hooks start and
// subscribed (at once with no hooks), so that a daemon that serves only
// then never lets an event slip before its hooks' start.
func (r *hookRunner) run(ctx context.Context, ready chan<- struct{}) error {
	var (
		cancel = func() {}
		done   chan error
		cur    *hooks.Dispatcher
		retry  <-chan time.Time
	)
	select {
	case d := <-r.next:
		r.next <- d
	default:
		close(ready) // no hooks
		ready = nil
	}
	start := func() {
		var rctx context.Context
		rctx, cancel = context.WithCancel(ctx)
		done = make(chan error, 1)
		d, first := cur, ready
		ready = nil
		go func() { done <- d.Run(rctx, first) }()
	}
	for {
		select {
		case <-ctx.Done():
			cancel()
			if done != nil {
				<-done
			}
			return nil
		case d := <-r.next:
			cancel()
			if done != nil {
				<-done
			}
			cur, retry = d, nil
			start()
		case err := <-done:
			done = nil
			if ctx.Err() != nil {
				return nil
			}
			r.log.Error("alert hooks stopped; restarting in 5s", "err", err)
			retry = time.After(5 * time.Second)
		case <-retry:
			retry = nil
			start()
		}
	}
}

// listenerLimits returns the listener limits c sets (internal/limits
// holds each one's default and why).
func listenerLimits(c Config) limits.Listener {
	// The flags' 0 is no cap (no reserve); the Listener's is the default.
	none := func(v int64) int {
		if v == 0 {
			return -1
		}
		return int(v)
	}
	return limits.Listener{
		MaxHeaderBytes:       int(c.MaxHeaderBytes),
		MaxRecvBytes:         int(c.MaxRecvBytes),
		MaxConns:             int(c.MaxConns),
		FDReserve:            none(c.FDReserve),
		IdleTimeout:          c.IdleTimeout,
		HandshakeTimeout:     c.HandshakeTimeout,
		MaxConcurrentStreams: int(c.MaxConcurrentStreams),
		KeepaliveMinTime:     c.KeepaliveMinTime,
		OpenStreams:          int(c.OpenMaxStreams),
		OpenStreamsPerSource: none(c.OpenMaxStreamsPerSource),
		PreAuthIdle:          c.PreAuthIdle,
		PreAuthPerSource:     none(c.PreAuthConnsPerSource),
		ReadsPerToken:        none(c.ReadsPerToken),
		WatchesPerToken:      none(c.WatchMaxStreamsPerToken),
		ListMaxUnpaged:       int(c.ListMaxUnpaged),
	}
}
