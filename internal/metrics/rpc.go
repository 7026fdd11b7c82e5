package metrics

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/breakerd/breakerd/internal/protocol"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// rpcBuckets are the RPC latency histogram's upper bounds, in seconds: an
// Allow served from Redis on a LAN takes about a millisecond, a List of a
// large fleet seconds.
var rpcBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// protocols are the label values of the protocol a call came by, indexed
// as rpcTimer reads them (protocol.From).
var protocols = [2]protocol.Name{protocol.GRPC, protocol.HTTP}

// rpcTimer times unary RPCs by method, status code and protocol
// (breakerd_rpc_duration_seconds).
//
// It is ours rather than go-grpc-middleware's Prometheus provider: that
// provider labels by service, method, type and code only, so the protocol
// (gRPC, or HTTP/JSON transcoded onto the same server: protocol.From)
// would be a context label resolved on every call, building a label set
// and hashing it on the hot path. The daemon's hot path resolves each
// series once (see byDecision), and so does this: a call looks its series
// up by method, protocol and code in arrays, with no allocation after the
// first call of each combination.
type rpcTimer struct {
	vec *prometheus.HistogramVec
	// byMethod is every unary method of the daemon's services, by full
	// method name; read-only after newRPCTimer.
	byMethod map[string]*methodSeries
}

// methodSeries are one method's observers, created on first use.
type methodSeries struct {
	name string
	obs  [len(protocols)][codes.Unauthenticated + 1]atomic.Pointer[observer]
}

type observer struct{ prometheus.Observer }

func newRPCTimer() *rpcTimer {
	t := &rpcTimer{
		vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "rpc_duration_seconds",
			Help:    "Time this daemon took to answer unary RPCs, by method, gRPC status code (OK included) and protocol (grpc, or http for the HTTP/JSON listener). Watch streams are not timed: they last as long as their watcher wants.",
			Buckets: rpcBuckets},
			[]string{"method", "code", "protocol"}),
		byMethod: map[string]*methodSeries{},
	}
	for _, sd := range []grpc.ServiceDesc{pb.BreakerService_ServiceDesc, healthpb.Health_ServiceDesc} {
		for _, md := range sd.Methods {
			t.byMethod["/"+sd.ServiceName+"/"+md.MethodName] = &methodSeries{name: md.MethodName}
		}
	}
	return t
}

// observe adds one call's duration to its series.
func (t *rpcTimer) observe(ctx context.Context, fullMethod string, code codes.Code, d time.Duration) {
	p := 0
	if protocol.From(ctx) == protocol.HTTP {
		p = 1
	}
	ms, ok := t.byMethod[fullMethod]
	if !ok || code > codes.Unauthenticated {
		observeTraced(ctx, t.vec.WithLabelValues(methodName(fullMethod), code.String(), string(protocols[p])), d)
		return
	}
	slot := &ms.obs[p][code]
	o := slot.Load()
	if o == nil {
		// Two first calls may both resolve it: the vector returns the same
		// series to both.
		o = &observer{t.vec.WithLabelValues(ms.name, code.String(), string(protocols[p]))}
		slot.Store(o)
	}
	observeTraced(ctx, o.Observer, d)
}

// observeTraced adds d to o, with the trace id of ctx's span as the
// sample's exemplar when that span is sampled (the daemon traces: docs/
// observability.md), so that a latency panel leads to a trace. Without a
// sampled span it is Observe, with no allocation.
func observeTraced(ctx context.Context, o prometheus.Observer, d time.Duration) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": sc.TraceID().String()})
			return
		}
	}
	o.Observe(d.Seconds())
}

// methodName is the label value of a full method name: its last part, as
// breakerd_rpc_errors_total names it.
func methodName(fullMethod string) string {
	return fullMethod[strings.LastIndex(fullMethod, "/")+1:]
}
