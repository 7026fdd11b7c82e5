package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/inproc"
	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/metrics"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// operate is the daemon's operating surface: Prometheus metrics, the logs
// of transitions and forces, and the policy reload.
type operate struct {
	reg     *prometheus.Registry
	m       *metrics.Metrics
	savings *metrics.Savings
}

// liveHeap adds go_gc_heap_live_bytes to the Go collector's series: the
// heap the last collection found live. Heap in use swings with GCPercent
// between collections; a leak shows in the live heap.
var liveHeap = collectors.WithGoCollectorRuntimeMetrics(collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})

// newOperate registers the metrics, hooks them into rdb (script latency)
// and hub (fleet events, which it also logs), and returns the gRPC server
// options that count decisions and log forces.
func newOperate(c Config, log *slog.Logger, rdb redis.UniversalClient, st *store.Store, hub *events.Hub) (*operate, []grpc.ServerOption, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(liveHeap), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := metrics.New(reg, metrics.Options{
		// The listing seeds the outage memory too (store.ListSeeding).
		Circuits:         st.ListSeeding,
		CircuitsInterval: c.CircuitsInterval,
		CooldownCap:      func(name string) time.Duration { return st.Policy(name).CooldownCap },
		MaxBreakerSeries: int(c.MaxBreakerSeries),
		Declared:         func(name string) bool { return st.Policies().Declares(name) },
	})
	if err != nil {
		return nil, nil, err
	}
	sv, err := metrics.NewSavings(reg, func(b string) *policy.Cost { return st.Policy(b).CostPerCall })
	if err != nil {
		return nil, nil, err
	}
	rdb.AddHook(m.RedisHook())
	hub.Observe(func(e *pb.Event) {
		m.ObserveEvent(e)
		logEvent(log, e)
	})
	return &operate{reg: reg, m: m, savings: sv}, []grpc.ServerOption{
		inproc.UnaryInterceptors(m.UnaryInterceptor(), logForces(log)),
	}, nil
}

// start serves metrics (when c.MetricsListen is set, under a connection
// cap of its own) and reloads the policy, tokens and hooks files (those
// set) on SIGHUP and on a change of their content, until ctx ends. It
// runs conns's sweep and summary (limits.Conns.Run) too.
func (o *operate) start(ctx context.Context, c Config, log *slog.Logger, rs []*fileReloader, conns *limits.Conns) error {
	go conns.Run(ctx, log, "api")
	if c.MetricsListen != "" {
		raw, err := net.Listen("tcp", c.MetricsListen)
		if err != nil {
			return fmt.Errorf("--metrics-listen %s: %w", c.MetricsListen, err)
		}
		mc, _ := limits.NewConns(metricsLimits(c))
		go mc.Run(ctx, log, "metrics")
		lis := mc.Listen(raw)
		log.Info("serving metrics", "addr", "http://"+lis.Addr().String()+"/metrics", "circuits_interval", c.CircuitsInterval)
		// The circuit gauges read the view background refreshes; a
		// scrape never reads Redis.
		go func() {
			if err := serveMetrics(ctx, lis, mc, o.reg); err != nil {
				log.Error("metrics listener ended", "err", err)
			}
		}()
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		<-ctx.Done()
		signal.Stop(hup)
	}()
	if len(rs) == 0 {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
					log.Warn("SIGHUP: no --config, --tokens or --hooks file, nothing to reload")
				}
			}
		}()
		return nil
	}
	var tick <-chan time.Time
	if c.ConfigPoll > 0 {
		t := time.NewTicker(c.ConfigPoll)
		go func() { <-ctx.Done(); t.Stop() }()
		tick = t.C
	}
	go runReloaders(ctx, rs, hup, tick)
	return nil
}

// metricsMaxConns caps the metrics listener's connections: it is
// outside --max-conns, so that no flood of the API's listeners stops a
// scrape; its connections come out of --fd-reserve. Scrapers need a few.
const metricsMaxConns = 64

// metricsLimits are the metrics listener's own connection limits: a
// scrape needs no token, so every connection is pre-auth, and a new one
// evicts the longest-idle (limits.Conns); no per-source cap, so that
// scrapers behind one address are not cut off.
func metricsLimits(c Config) limits.Listener {
	return limits.Listener{MaxConns: metricsMaxConns, FDReserve: -1, PreAuthIdle: c.PreAuthIdle, PreAuthPerSource: -1}
}

// serveMetrics serves /metrics on lis (metrics.Handler) until ctx ends,
// each scrape reported to mc (limits.Track) so that eviction passes over
// a scrape in flight.
func serveMetrics(ctx context.Context, lis net.Listener, mc *limits.Conns, g prometheus.Gatherer) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(g))
	never := func(*http.Request) bool { return false }
	srv := &http.Server{Handler: limits.Track(mux, never), ReadHeaderTimeout: 5 * time.Second, ConnContext: mc.ConnContext}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: serve: %w", err)
	}
	return nil
}

// logEvent logs one fleet event as heard on the live feed. Every replica
// hears (and logs) every event: event_id tells duplicates apart.
func logEvent(log *slog.Logger, e *pb.Event) {
	who, msg := "worker", "breaker "+metrics.StateLabel(e.GetTo())
	switch e.GetKind() {
	case pb.EventKind_EVENT_KIND_FORCED:
		who = "operator"
	case pb.EventKind_EVENT_KIND_STATE_LOST: // from: the state a daemon heard; to: what Redis holds
		who, msg = "daemon", "breaker state lost by redis"
	}
	log.Info(msg,
		"breaker", e.GetBreaker(),
		"kind", breaker.EnumName(e.GetKind()),
		"from", metrics.StateLabel(e.GetFrom()),
		"to", metrics.StateLabel(e.GetTo()),
		who, e.GetActor(),
		"generation", e.GetGeneration(),
		"reason", e.GetReason(),
		"failures", e.GetFailures(),
		"distinct_workers", e.GetDistinctWorkers(),
		"cooldown", time.Duration(e.GetCooldownMs())*time.Millisecond,
		"event_id", e.GetId())
}

// maxLogged bounds a caller's string in a log line, in bytes: what the
// server accepts for names and reasons.
const maxLogged = 256

// clip cuts s to maxLogged bytes on a rune boundary, marking the cut.
func clip(s string) string {
	if len(s) <= maxLogged {
		return s
	}
	return strings.ToValidUTF8(s[:maxLogged], "") + "…(cut)"
}

// logForces logs every Force this daemon serves, once, with its outcome,
// and, with --tokens, the name of the token that authenticated it
// (auth.FromContext): the operator field is the caller's word, the token
// is not.
func logForces(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		fr, ok := req.(*pb.ForceRequest)
		if !ok {
			return h(ctx, req)
		}
		start := time.Now()
		resp, err := h(ctx, req)
		// A refused Force's fields were never validated: cut them, so a
		// 500 KB reason is not a 500 KB log line.
		attrs := []any{"breaker", clip(fr.GetBreaker()), "mode", fr.GetMode().String(), "operator", clip(fr.GetOperator()),
			"reason", clip(fr.GetReason()), "ttl", time.Duration(fr.GetTtlMs()) * time.Millisecond, "took", time.Since(start)}
		if id, ok := auth.FromContext(ctx); ok {
			attrs = append(attrs, "token", id.Name)
		}
		if err != nil {
			log.Warn("force failed", append(attrs, "code", status.Code(err).String(), "err", status.Convert(err).Message())...)
			return resp, err
		}
		if r, ok := resp.(*pb.ForceResponse); ok {
			attrs = append(attrs, "state", metrics.StateLabel(r.GetState().GetState()), "generation", r.GetState().GetGeneration())
		}
		log.Info("force", attrs...)
		return resp, err
	}
}
