// Package server implements the breakerd.v1 gRPC API on top of the store:
// it validates requests, runs one store call per RPC, and maps failures to
// gRPC status codes in one place (statusOf). Decisions are data in the
// responses, never errors.
package server

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/httpapi"
	"github.com/breakerd/breakerd/internal/inproc"
	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/protocol"
	"github.com/breakerd/breakerd/internal/quorum"
	"github.com/breakerd/breakerd/internal/scope"
	"github.com/breakerd/breakerd/internal/store"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// MaxNameBytes bounds breaker names and worker ids (limits.MaxNameBytes,
// which the Go client checks too).
const MaxNameBytes = limits.MaxNameBytes

// MaxBatch bounds the names of one BatchGet or Watch.
const MaxBatch = limits.MaxBatch

// maxMessageBytes bounds the failure text a Record may carry and a Force
// reason.
const maxMessageBytes = store.MaxMessageBytes

// maxForceTTLMs bounds a Force TTL (365 days); 0 means until AUTO.
const maxForceTTLMs = 365 * 24 * 3600 * 1000

// maxTokenBytes bounds a ticket's lease token (breakerd issues 32).
const maxTokenBytes = 64

// Server serves BreakerService. It is stateless and safe for concurrent use.
type Server struct {
	pb.UnimplementedBreakerServiceServer
	store  *store.Store
	hub    *events.Hub
	quotas *quotas
	// policies is the policy set a Record's input is built under: the
	// store's, read once per Record.
	policies func() store.Resolver
	// scopes runs Allow and Record with parent scopes (a policy's
	// parent; internal/scope), its view of parents fed by hub.
	scopes *scope.Scopes
	// lim is the listener limits: the per-token gates below, the List
	// cap, and what NewGRPC applies to the gRPC server.
	lim          limits.Listener
	reads, watch limits.Gate
	// heartbeat is how often an idle Watch stream sends a heartbeat
	// (WithHeartbeat).
	heartbeat time.Duration
	// calls reports each call to its connection (WithCalls); nil: none.
	calls *limits.Calls
	// local is the service NewGRPC registered, for calls in process
	// (InProcess); nil before NewGRPC.
	local *inproc.Service
}

// New returns a Server over st; hub feeds Watch and the view of parent
// scopes.
func New(st *store.Store, hub *events.Hub) *Server {
	s := &Server{store: st, hub: hub, quotas: newQuotas(Limits{}), scopes: scope.New(st, hub, nil),
		policies: func() store.Resolver { return st.Policies() }}
	return s.WithListener(limits.Listener{})
}

// WithListener sets the listener limits (zero fields at their defaults)
// and returns s. Call it before NewGRPC.
func (s *Server) WithListener(l limits.Listener) *Server {
	s.lim = l.WithDefaults()
	s.reads = limits.Gate{Methods: []string{"Get", "BatchGet", "List", "Events", "Savings"}, Cap: limits.NewPerKey(s.lim.ReadsPerToken), What: "read calls"}
	s.watch = limits.Gate{Methods: []string{"Watch"}, Cap: limits.NewPerKey(s.lim.WatchesPerToken), What: "Watch streams"}
	return s
}

// Gates returns the per-token caps on reads and on Watch streams, for
// another listener (HTTP) to count its calls in the same slots.
func (s *Server) Gates() (reads, watch limits.Gate) { return s.reads, s.watch }

// TokenKey names a token's calls in the per-token caps.
func TokenKey(id auth.Identity) string { return fmt.Sprintf("token %q", id.Name) }

// CallerKey names who a call counts under in the per-token caps: its
// token (`token "pool-a"`), known from the tap before the request is
// decoded, or without tokens its connection.
func CallerKey(ctx context.Context) string {
	if id, ok := auth.Caller(ctx); ok {
		return TokenKey(id)
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return "connection " + p.Addr.String()
	}
	return "connection (unknown)"
}

// WithCalls has the gRPC server NewGRPC returns report each call to its
// connection's cap (limits.Calls), and returns s. Call it before NewGRPC.
func (s *Server) WithCalls(c *limits.Calls) *Server {
	s.calls = c
	return s
}

// WithHeartbeat sets how often an idle Watch stream sends a heartbeat
// (a WatchResponse with no event and heartbeat_ms set), and returns s; 0
// means httpapi.DefaultHeartbeat, the interval both streams share (the
// daemon's --http-heartbeat). Call it before serving.
func (s *Server) WithHeartbeat(d time.Duration) *Server {
	s.heartbeat = d
	return s
}

// heartbeatEvery is the Watch heartbeat interval in force.
func (s *Server) heartbeatEvery() time.Duration {
	if s.heartbeat > 0 {
		return s.heartbeat
	}
	return httpapi.DefaultHeartbeat
}

// WithLimits sets the per-token quotas (see Limits) and returns s. Call
// it before serving.
func (s *Server) WithLimits(l Limits) *Server {
	s.quotas = newQuotas(l)
	s.store.SetAlertQuota(s.quotas)
	return s
}

// admit applies the quotas to a call that names breaker. The context it
// returns is the call's: when the quota asked Redis, the call's decision
// shares the bound that read began (store.DecisionBegun).
func (s *Server) admit(ctx context.Context, breaker string) (context.Context, error) {
	err := s.quotas.admitBreaker(ctx, breaker, func() (bool, error) {
		ctx = store.DecisionBegun(ctx, time.Now())
		ok, err := s.store.Exists(ctx, breaker)
		return ok, statusOf(ctx, err)
	})
	return ctx, err
}

// NewGRPC returns a gRPC server carrying the service, the standard
// grpc.health.v1 service (every name in HealthServices starting
// NOT_SERVING: the caller sets them with SetServing by the daemon's health
// rule, docs/reliability.md#health)
// and server reflection, under the listener limits (WithListener): the
// transport's, the cap on streams that need no token, and the per-token
// gates, taken before a request is decoded, each call reported to its
// connection (WithCalls) before them. Serve it on a listener wrapped by
// limits.Conns. Give the unary interceptors in opts with
// inproc.UnaryInterceptors, so that the calls InProcess serves run them
// too.
func (s *Server) NewGRPC(opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	first := s.lim.GRPCOptions()
	if s.calls != nil {
		first = append(first, s.calls.ServerOption())
	}
	opts = append(append(first, opts...), grpc.ChainStreamInterceptor(s.lim.OpenStreamCap(auth.Open)),
		grpc.NumStreamWorkers(streamWorkers()))
	g := grpc.NewServer(opts...)
	reg := s.calls.Registrar(g)
	sd := reg.Wrap(limits.WrapService(&pb.BreakerService_ServiceDesc, CallerKey, s.reads, s.watch))
	g.RegisterService(sd, s)
	s.local = inproc.NewService(sd, s, inproc.Chain(opts))
	hs := health.NewServer()
	SetServing(hs, false)
	healthpb.RegisterHealthServer(reg, hs)
	reflection.Register(reg)
	return g, hs
}

// InProcess returns BreakerService's unary methods as NewGRPC registered
// them, to call in process: each call takes the gates and is reported to
// its connection as one the server serves, and runs through the unary
// interceptors NewGRPC was given with inproc.UnaryInterceptors. Nil
// before NewGRPC.
func (s *Server) InProcess() *inproc.Service { return s.local }

// streamWorkers is how many goroutines the gRPC server keeps to run
// calls on: a call runs on an idle one, or on a new goroutine when every
// one is busy. A kept goroutine keeps the stack the handlers grew it to,
// where a new one starts at the minimum and copies its stack as a call
// deepens (a tenth of the daemon's CPU on a healthy Allow+Record pair
// when every call had a goroutine of its own; docs/performance.md). Enough
// for the calls a loaded daemon has waiting on Redis at once (a worker
// still finishing one call when its caller sends the next is busy too).
func streamWorkers() uint32 { return uint32(max(128, 16*runtime.GOMAXPROCS(0))) }

// HealthServices returns the names the health service answers for: ""
// (the server as a whole, what load balancers ask) and
// breakerd.v1.BreakerService (what per-service checks, such as Envoy's or
// grpc-health-probe -service, ask). The service is the server's only one,
// so the two always agree.
func HealthServices() []string {
	return []string{"", pb.BreakerService_ServiceDesc.ServiceName}
}

// SetServing sets every name in HealthServices to SERVING or NOT_SERVING
// at once. (hs.Shutdown, at stop, sets them all NOT_SERVING for good.)
func SetServing(hs *health.Server, serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range HealthServices() {
		hs.SetServingStatus(name, st)
	}
}

// Allow implements BreakerService.Allow.
func (s *Server) Allow(ctx context.Context, req *pb.AllowRequest) (*pb.AllowResponse, error) {
	if err := validName("breaker", req.GetBreaker()); err != nil {
		return nil, err
	}
	if err := validWorker("worker_id", req.GetWorkerId()); err != nil {
		return nil, err
	}
	if req.GetTool() != "" {
		if err := limits.ToolName("tool", req.GetTool()); err != nil {
			return nil, fieldStatus(err)
		}
	}
	ctx, err := s.admit(ctx, req.GetBreaker())
	if err != nil {
		return nil, err
	}
	res, err := s.scopes.Allow(ctx, req.GetBreaker(), req.GetWorkerId())
	if err != nil {
		return nil, statusOf(ctx, err)
	}
	s.countDenial(req, res)
	if req.GetWithPolicy() {
		res.Policy = effectivePolicy(s.store.Policies(), req.GetBreaker())
	}
	return withToolResult(res, req.GetBreaker(), req.GetTool()), nil
}

// Record implements BreakerService.Record.
func (s *Server) Record(ctx context.Context, req *pb.RecordRequest) (*pb.RecordResponse, error) {
	ctx, in, err := s.validRecord(ctx, req)
	if err != nil {
		return nil, err
	}
	in = in.WithTrace(callTrace(ctx))
	res, err := s.scopes.Record(ctx, in)
	if err != nil {
		return nil, statusOf(ctx, err)
	}
	return classified(res, in), nil
}

// classified sets what res's record was taken as, and why: an outcome
// that moves a breaker (a success, a counted failure) but did not move
// this one says so, with the store's note (a stale ticket, not the probe).
func classified(res *pb.RecordResponse, in store.RecordInput) *pb.RecordResponse {
	res.ClassifiedAs, res.Why = in.Outcome, in.Why
	if ev := in.Call.Evidence; (ev.Counted() || ev == quorum.Healthy) && !res.GetCounted() && res.GetNote() != "" {
		res.Why += "; not counted here: " + res.GetNote()
	}
	return res
}

// validRecord checks a Record's request, builds its input once
// (store.NewRecordInput: the policy resolved, the outcome classified from
// the evidence when the request sent none) and charges its quotas: the
// InvalidArgument names the field. It never writes req. The context it
// returns is the call's (see admit).
func (s *Server) validRecord(ctx context.Context, req *pb.RecordRequest) (context.Context, store.RecordInput, error) {
	if err := validName("breaker", req.GetBreaker()); err != nil {
		return ctx, store.RecordInput{}, err
	}
	if err := validWorker("worker_id", req.GetWorkerId()); err != nil {
		return ctx, store.RecordInput{}, err
	}
	in, err := store.NewRecordInput(req, s.policies(), s.store.Now())
	if err != nil {
		return ctx, store.RecordInput{}, fieldStatus(err)
	}
	if err := validTicket(req.GetTicket()); err != nil {
		return ctx, store.RecordInput{}, err
	}
	ctx, err = s.admit(ctx, req.GetBreaker())
	return ctx, in, err
}

// validTicket checks a Record's ticket.
func validTicket(t *pb.Ticket) error {
	switch {
	case t == nil:
		return invalid("ticket", "is required: pass the ticket Allow returned")
	case t.GetGeneration() < 0:
		return invalid("ticket.generation", "must not be negative, got %d", t.GetGeneration())
	case len(t.GetLeaseToken()) > maxTokenBytes || !printable(t.GetLeaseToken()):
		return invalid("ticket.lease_token", "must be printable and at most %d bytes", maxTokenBytes)
	case t.GetParentGeneration() < 0:
		return invalid("ticket.parent_generation", "must not be negative, got %d", t.GetParentGeneration())
	case len(t.GetParentLeaseToken()) > maxTokenBytes || !printable(t.GetParentLeaseToken()):
		return invalid("ticket.parent_lease_token", "must be printable and at most %d bytes", maxTokenBytes)
	}
	return nil
}

// Get implements BreakerService.Get.
func (s *Server) Get(ctx context.Context, req *pb.GetRequest) (*pb.GetResponse, error) {
	if err := validName("breaker", req.GetBreaker()); err != nil {
		return nil, err
	}
	st, err := s.State(ctx, req.GetBreaker())
	if err != nil {
		return nil, statusOf(ctx, err)
	}
	return &pb.GetResponse{State: st}, nil
}

// State is Get's answer for breaker: its state, deny_until_ms with its
// parent scope's denial. Errors are the store's.
func (s *Server) State(ctx context.Context, breaker string) (*pb.BreakerState, error) {
	st, err := s.store.Get(ctx, breaker)
	if err != nil {
		return nil, err
	}
	s.scopes.WithParents(ctx, []*pb.BreakerState{st})
	return st, nil
}

// WithParents puts the parent scopes' verdicts into states'
// deny_until_ms, as Get, BatchGet and List answer (scope.Scopes.WithParents).
func (s *Server) WithParents(ctx context.Context, states []*pb.BreakerState) {
	s.scopes.WithParents(ctx, states)
}

// BatchGet implements BreakerService.BatchGet.
func (s *Server) BatchGet(ctx context.Context, req *pb.BatchGetRequest) (*pb.BatchGetResponse, error) {
	if err := validNames("breakers", req.GetBreakers()); err != nil {
		return nil, err
	}
	if w := req.GetWorkerId(); w != "" {
		if err := validWorker("worker_id", w); err != nil {
			return nil, err
		}
	}
	st, err := s.store.BatchGet(ctx, req.GetBreakers())
	if err != nil {
		return nil, statusOf(ctx, err)
	}
	s.scopes.WithParents(ctx, st)
	forWorker(st, req.GetWorkerId())
	return &pb.BatchGetResponse{States: st}, nil
}

// List implements BreakerService.List.
func (s *Server) List(ctx context.Context, req *pb.ListRequest) (*pb.ListResponse, error) {
	if len(req.GetStates()) > len(pb.State_name) {
		return nil, invalid("states", "at most %d states, got %d", len(pb.State_name), len(req.GetStates()))
	}
	for i, st := range req.GetStates() {
		if _, ok := pb.State_name[int32(st)]; !ok || st == pb.State_STATE_UNSPECIFIED {
			return nil, invalid(fmt.Sprintf("states[%d]", i), "unknown state %v", st)
		}
	}
	if n := req.GetPageSize(); n < 0 || n > store.MaxPageSize {
		return nil, invalid("page_size", "must be 0 (no paging) to %d, got %d", store.MaxPageSize, n)
	}
	if req.GetPageSize() == 0 {
		if req.GetPageToken() != "" {
			return nil, invalid("page_token", "needs a page_size")
		}
		return s.listAll(ctx, req.GetStates())
	}
	st, next, err := s.store.ListPage(ctx, req.GetPageToken(), int64(req.GetPageSize()), req.GetStates()...)
	if errors.Is(err, store.ErrBadPageToken) {
		return nil, invalid("page_token", "is not one List returned, or the Redis Cluster's masters changed since: list again from the start")
	}
	if err != nil {
		return nil, statusOf(ctx, err)
	}
	s.scopes.WithParents(ctx, st)
	return &pb.ListResponse{States: st, NextPageToken: next}, nil
}

// listAll answers a List with page_size 0: every breaker in states, in
// full, read a page at a time so that past the cap (ListMaxUnpaged) it
// is refused with what it had read so far held, never a whole fleet.
// An answer is never cut short.
func (s *Server) listAll(ctx context.Context, states []pb.State) (*pb.ListResponse, error) {
	var out []*pb.BreakerState
	seen := map[string]bool{} // a page boundary can repeat a breaker (SCAN)
	for token := ""; ; {
		page, next, err := s.store.ListPage(ctx, token, store.MaxPageSize, states...)
		if err != nil {
			return nil, statusOf(ctx, err)
		}
		for _, st := range page {
			if !seen[st.GetBreaker()] {
				seen[st.GetBreaker()] = true
				out = append(out, st)
			}
		}
		if len(out) > s.lim.ListMaxUnpaged {
			return nil, status.Errorf(codes.ResourceExhausted,
				"page_size: 0 answers at most %d breakers, and more match; set page_size (1 to %d) and follow next_page_token", s.lim.ListMaxUnpaged, store.MaxPageSize)
		}
		if token = next; token == "" {
			s.scopes.WithParents(ctx, out)
			return &pb.ListResponse{States: out}, nil
		}
	}
}

// Force implements BreakerService.Force.
func (s *Server) Force(ctx context.Context, req *pb.ForceRequest) (*pb.ForceResponse, error) {
	if err := validName("breaker", req.GetBreaker()); err != nil {
		return nil, err
	}
	mode := req.GetMode()
	switch mode {
	case pb.ForceMode_FORCE_MODE_OPEN, pb.ForceMode_FORCE_MODE_CLOSED:
		if req.GetReason() == "" {
			return nil, invalid("reason", "is required to force a breaker %s", map[pb.ForceMode]string{
				pb.ForceMode_FORCE_MODE_OPEN: "open", pb.ForceMode_FORCE_MODE_CLOSED: "closed"}[mode])
		}
	case pb.ForceMode_FORCE_MODE_AUTO:
	case pb.ForceMode_FORCE_MODE_SHADOW:
		switch req.GetShadow() {
		case pb.ShadowSetting_SHADOW_SETTING_ON, pb.ShadowSetting_SHADOW_SETTING_OFF:
			if req.GetReason() == "" {
				return nil, invalid("reason", "is required to set a breaker's shadow mode %s",
					map[pb.ShadowSetting]string{pb.ShadowSetting_SHADOW_SETTING_ON: "on", pb.ShadowSetting_SHADOW_SETTING_OFF: "off"}[req.GetShadow()])
			}
		case pb.ShadowSetting_SHADOW_SETTING_POLICY:
		default:
			return nil, invalid("shadow", "must be ON, OFF or POLICY with mode SHADOW, got %v", req.GetShadow())
		}
		if req.GetTtlMs() != 0 {
			return nil, invalid("ttl_ms", "must be 0 with mode SHADOW (a shadow setting lasts until an operator changes it), got %d", req.GetTtlMs())
		}
	default:
		return nil, invalid("mode", "must be OPEN, CLOSED, AUTO or SHADOW, got %v", mode)
	}
	if mode != pb.ForceMode_FORCE_MODE_SHADOW && req.GetShadow() != pb.ShadowSetting_SHADOW_SETTING_UNSPECIFIED {
		return nil, invalid("shadow", "is set only with mode SHADOW, got %v with mode %v", req.GetShadow(), mode)
	}
	if len(req.GetReason()) > maxMessageBytes || !printable(req.GetReason()) {
		return nil, invalid("reason", "must be printable text of at most %d bytes", maxMessageBytes)
	}
	if req.GetTtlMs() < 0 || req.GetTtlMs() > maxForceTTLMs {
		return nil, invalid("ttl_ms", "must be between 0 (until AUTO) and %d (365 days), got %d", maxForceTTLMs, req.GetTtlMs())
	}
	operator := req.GetOperator()
	if operator == "" {
		operator = "operator"
	}
	if err := validName("operator", operator); err != nil {
		return nil, err
	}
	var st *pb.BreakerState
	var err error
	if mode == pb.ForceMode_FORCE_MODE_SHADOW {
		st, err = s.store.SetShadow(ctx, req.GetBreaker(), req.GetShadow(), req.GetReason(), operator)
	} else {
		st, err = s.store.Force(ctx, req.GetBreaker(), mode, req.GetReason(), time.Duration(req.GetTtlMs())*time.Millisecond, operator)
	}
	if err != nil {
		return nil, statusOf(ctx, err)
	}
	return &pb.ForceResponse{State: st}, nil
}

// Watch implements BreakerService.Watch.
func (s *Server) Watch(req *pb.WatchRequest, stream grpc.ServerStreamingServer[pb.WatchResponse]) error {
	if err := validNames("breakers", req.GetBreakers()); err != nil {
		return err
	}
	sub, err := s.hub.SubscribeAs(ownerOf(stream.Context()), req.GetBreakers())
	if err != nil {
		return status.Error(codes.ResourceExhausted, err.Error()+"; close a Watch stream or watch from another daemon")
	}
	defer sub.Close()
	// Headers tell the caller the subscription is live: every event from
	// here on will reach it.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	// A heartbeat opens the stream (announcing the interval) and follows
	// each interval with nothing sent: a client that hears nothing for
	// longer knows the stream stalled (docs/go-client.md#stalled-streams).
	every := s.heartbeatEvery()
	beat := &pb.WatchResponse{HeartbeatMs: every.Milliseconds()}
	if err := stream.Send(beat); err != nil {
		return err
	}
	idle := time.NewTimer(every)
	defer idle.Stop()
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-idle.C:
			if err := stream.Send(beat); err != nil {
				return err
			}
			idle.Reset(every)
		case e, ok := <-sub.C:
			if !ok {
				switch err := sub.Err(); {
				case errors.Is(err, events.ErrFeedLost):
					return status.Error(codes.Unavailable, err.Error()+"; events may be missing: resubscribe and resync from List")
				case err != nil:
					return status.Error(codes.ResourceExhausted, err.Error()+"; resubscribe and resync from List")
				}
				return status.Error(codes.Unavailable, "breakerd is shutting down")
			}
			if !req.GetRunNotices() && store.IsNotice(e) {
				continue
			}
			if err := stream.Send(&pb.WatchResponse{Event: e}); err != nil {
				return err
			}
			idle.Reset(every)
		}
	}
}

// Events implements BreakerService.Events.
func (s *Server) Events(ctx context.Context, req *pb.EventsRequest) (*pb.EventsResponse, error) {
	if req.GetBreaker() != "" {
		if err := validName("breaker", req.GetBreaker()); err != nil {
			return nil, err
		}
	}
	if req.GetSinceMs() < 0 {
		return nil, invalid("since_ms", "must not be negative, got %d", req.GetSinceMs())
	}
	if req.GetLimit() < 0 || req.GetLimit() > store.MaxEventsLimit {
		return nil, invalid("limit", "must be between 0 and %d, got %d", store.MaxEventsLimit, req.GetLimit())
	}
	evs, err := s.store.Events(ctx, store.EventQuery{Breaker: req.GetBreaker(),
		Since: time.Duration(req.GetSinceMs()) * time.Millisecond, Limit: int(req.GetLimit())})
	if err != nil {
		return nil, statusOf(ctx, err)
	}
	return &pb.EventsResponse{Events: evs}, nil
}

// validName checks a breaker name or operator with limits.Name (the
// check the Go client makes too), as InvalidArgument.
func validName(field, v string) error {
	if err := limits.Name(field, v); err != nil {
		return fieldStatus(err)
	}
	return nil
}

// validWorker checks a worker id with limits.WorkerID (the check the Go
// client makes too), as InvalidArgument.
func validWorker(field, v string) error {
	if err := limits.WorkerID(field, v); err != nil {
		return fieldStatus(err)
	}
	return nil
}

// validNames checks a list of breaker names with limits.Names: at most
// MaxBatch, each as validName, errors naming the element ("breakers[3]").
func validNames(field string, names []string) error {
	if err := limits.Names(field, names); err != nil {
		return fieldStatus(err)
	}
	return nil
}

func printable(v string) bool { return limits.Printable(v) }

func invalid(field, format string, args ...any) error {
	return fieldViolation(field, fmt.Sprintf(format, args...))
}

// fieldViolation is the InvalidArgument for one request field: the text
// "field: problem", and the same as a google.rpc.BadRequest field
// violation in the status details, so that no client parses the text.
func fieldViolation(field, problem string) error {
	st := status.New(codes.InvalidArgument, field+": "+problem)
	br := &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: problem}}}
	if d, err := st.WithDetails(br); err == nil {
		st = d
	}
	return st.Err()
}

// fieldStatus is fieldViolation for a *limits.FieldError, or an
// InvalidArgument with err's text for any other error.
func fieldStatus(err error) error {
	var fe *limits.FieldError
	if errors.As(err, &fe) {
		return fieldViolation(fe.Field, fe.Problem)
	}
	return status.Error(codes.InvalidArgument, err.Error())
}

// nested is err (a request field's InvalidArgument) for the same field
// under prefix ("records[3]"): its text and its field violations.
func nested(prefix string, err error) error {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			fv := br.GetFieldViolations()[0]
			return fieldViolation(prefix+"."+fv.GetField(), fv.GetDescription())
		}
	}
	return status.Errorf(st.Code(), "%s.%s", prefix, st.Message())
}

// statusOf maps a store error to a gRPC status: the one place that does.
func statusOf(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.As(err, new(*store.CeilingError)):
		return status.Error(codes.ResourceExhausted, err.Error())
	case ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case store.IsUnavailable(err):
		st, derr := status.New(codes.Unavailable, "redis unavailable: "+err.Error()).WithDetails(
			&errdetails.ErrorInfo{Reason: protocol.ReasonRedisUnavailable, Domain: protocol.ErrorDomain})
		if derr != nil {
			return status.Errorf(codes.Unavailable, "redis unavailable: %v", err)
		}
		return st.Err()
	}
	return status.Errorf(codes.Internal, "%v", err)
}
