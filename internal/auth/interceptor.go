package auth

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"

	"github.com/breakerd/breakerd/internal/inproc"
)

// servicePrefix starts every breakerd.v1 method name.
const servicePrefix = "/" + "breakerd.v1.BreakerService" + "/"

// workerMethods are the breakerd.v1 methods a worker token may call. Every
// other breakerd.v1 method (Force, and any added later) needs an operator.
var workerMethods = map[string]bool{
	"Allow": true, "Record": true, "RecordBatch": true, "Get": true, "BatchGet": true, "List": true, "Watch": true,
	// GetPolicy: a client's local fallback reads its threshold and cooldown.
	"GetPolicy": true,
	// Events: the logged form of what Watch streams live (a worker
	// sees the same of its breakers either way); one breaker's log per
	// call for a worker (checkEvents).
	"Events": true,
	// ReportSavings: a client reports the calls it refused itself;
	// Savings reads what its breakers saved.
	"ReportSavings": true, "Savings": true,
}

// openPrefixes are services that stay open without a token: health checks
// (load balancers, the image's healthcheck) and reflection (grpcurl).
var openPrefixes = []string{
	"/grpc.health.v1.Health/",
	"/grpc.reflection.v1.ServerReflection/",
	"/grpc.reflection.v1alpha.ServerReflection/",
}

// Authenticator checks bearer tokens on every call. Its token table can be
// swapped while serving (Set), for a config reload. It is safe for
// concurrent use.
type Authenticator struct {
	tokens atomic.Pointer[Tokens]

	mu      sync.Mutex
	changed chan struct{} // closed by Set, then replaced
}

// New returns an Authenticator over t.
func New(t *Tokens) *Authenticator {
	a := &Authenticator{changed: make(chan struct{})}
	a.tokens.Store(t)
	return a
}

// Set replaces the token table. Unary calls already authenticated finish
// under the table they met; a stream whose token is gone from t, or whose
// entry changed, ends with Unauthenticated.
func (a *Authenticator) Set(t *Tokens) {
	a.tokens.Store(t)
	a.mu.Lock()
	defer a.mu.Unlock()
	close(a.changed)
	a.changed = make(chan struct{})
}

// changes returns the channel the next Set closes.
func (a *Authenticator) changes() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.changed
}

type ctxKey struct{}

// FromContext returns the caller's identity, set by the interceptors.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(Identity)
	return id, ok
}

// Caller returns the caller's identity as soon as it is known: from the
// tap handle, before the request is decoded (what a limit counts a call
// under), or from the interceptors.
func Caller(ctx context.Context) (Identity, bool) {
	if id, ok := ctx.Value(tapKey{}).(Identity); ok {
		return id, true
	}
	return FromContext(ctx)
}

// ServerOptions returns the tap handle and the interceptors that enforce
// the tokens. The tap (grpc.InTapHandle) refuses a call without a known
// token before its request is read, so an unauthenticated caller costs no
// memory for its message; the interceptors (chained, so they compose with
// others) check the role, worker ids and breakers against the request. A
// server takes only one InTapHandle: this is it.
func (a *Authenticator) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InTapHandle(a.tap),
		inproc.UnaryInterceptors(a.unary),
		grpc.ChainStreamInterceptor(a.stream),
	}
}

// tapKey carries the identity the tap found, so the interceptors do not
// look the token up twice.
type tapKey struct{}

// tap runs on the connection's reader before a stream is created: it
// refuses a breakerd call without a known token (Unauthenticated) and
// passes the identity on. Lookup is a few SHA-256 comparisons: cheap
// enough for the connection goroutine it runs on.
func (a *Authenticator) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if open(info.FullMethodName) {
		return ctx, nil
	}
	id, err := a.identify(info.Header)
	if err != nil {
		return nil, err
	}
	return context.WithValue(ctx, tapKey{}, id), nil
}

// Open reports whether method needs no token: the health service and
// reflection.
func Open(method string) bool { return open(method) }

func open(method string) bool {
	for _, p := range openPrefixes {
		if strings.HasPrefix(method, p) {
			return true
		}
	}
	return false
}

// identify returns the identity of md's bearer token, or Unauthenticated.
func (a *Authenticator) identify(md metadata.MD) (Identity, error) {
	token, err := bearer(md)
	if err != nil {
		return Identity{}, err
	}
	id, found := a.tokens.Load().Lookup(token)
	if !found {
		return Identity{}, status.Error(codes.Unauthenticated, "authorization: unknown bearer token")
	}
	return id, nil
}

// authorize returns the caller's identity for method, or the status error:
// Unauthenticated without a known token, PermissionDenied for the wrong
// role. ok is false for open methods (no identity needed).
func (a *Authenticator) authorize(ctx context.Context, method string) (Identity, bool, error) {
	if open(method) {
		return Identity{}, false, nil
	}
	id, tapped := ctx.Value(tapKey{}).(Identity)
	if !tapped {
		md, _ := metadata.FromIncomingContext(ctx)
		var err error
		if id, err = a.identify(md); err != nil {
			return Identity{}, false, err
		}
	}
	short, isBreakerd := strings.CutPrefix(method, servicePrefix)
	if id.Role != RoleOperator && !(isBreakerd && workerMethods[short]) {
		return Identity{}, false, status.Errorf(codes.PermissionDenied,
			"authorization: token %q has role %s, which may not call %s (operator only)", id.Name, id.Role, method)
	}
	return id, true, nil
}

// bearer reads "authorization: Bearer <token>" from the call's metadata.
func bearer(md metadata.MD) (string, error) {
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return "", status.Error(codes.Unauthenticated, `authorization: missing; send metadata "authorization: Bearer <token>"`)
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", status.Error(codes.Unauthenticated, `authorization: want "Bearer <token>"`)
	}
	return strings.TrimSpace(token), nil
}

// workerRequest is any request that names the worker it acts for.
type workerRequest interface{ GetWorkerId() string }

// breakerRequest is any request that names one breaker (Allow, Record,
// Get, Force, Events).
type breakerRequest interface{ GetBreaker() string }

// breakersRequest is any request that names breakers (BatchGet, Watch).
type breakersRequest interface{ GetBreakers() []string }

// maxQuoted bounds a caller's value quoted back in an error: the
// interceptor runs before the server validates lengths.
const maxQuoted = 64

// quote returns v quoted for an error message, cut to maxQuoted bytes.
func quote(v string) string {
	if len(v) > maxQuoted {
		return strconv.Quote(strings.ToValidUTF8(v[:maxQuoted], "")) + "…"
	}
	return strconv.Quote(v)
}

// checkBreakers returns PermissionDenied when req names a breaker outside
// id's globs. A limited token must name its breakers: a request for every
// breaker (a Watch or Events without names) is refused too. List is
// answered and then filtered (filterResponse).
func checkBreakers(id Identity, req any) error {
	if !id.Limited() {
		return nil
	}
	deny := func(field, b string) error {
		return status.Errorf(codes.PermissionDenied, "%s: token %q may not name breaker %s (it is limited to %s)",
			field, id.Name, quote(b), strings.Join(id.Breakers, ", "))
	}
	if r, ok := req.(breakerRequest); ok {
		b := r.GetBreaker()
		if _, isEvents := req.(*pb.EventsRequest); isEvents && b == "" {
			return status.Errorf(codes.PermissionDenied, "breaker: token %q is limited to %s; name one breaker", id.Name, strings.Join(id.Breakers, ", "))
		}
		if !id.MayUse(b) {
			return deny("breaker", b)
		}
	}
	if r, ok := req.(breakersRequest); ok {
		names := r.GetBreakers()
		if _, isWatch := req.(*pb.WatchRequest); isWatch && len(names) == 0 {
			return status.Errorf(codes.PermissionDenied, "breakers: token %q is limited to %s; a Watch must name its breakers", id.Name, strings.Join(id.Breakers, ", "))
		}
		if _, isSavings := req.(*pb.SavingsRequest); isSavings && len(names) == 0 {
			return status.Errorf(codes.PermissionDenied, "breakers: token %q is limited to %s; a Savings read must name its breakers", id.Name, strings.Join(id.Breakers, ", "))
		}
		for i, b := range names {
			if !id.MayUse(b) {
				return deny(fmt.Sprintf("breakers[%d]", i), b)
			}
		}
	}
	return nil
}

// checkEvents returns PermissionDenied for an Events read of every
// breaker by a worker token. That read scans the keyspace and holds each
// breaker's newest events in memory to merge them, so its cost grows with
// the breakers any worker may create: it is for operators. A worker reads
// the events of a breaker it names, one bounded log per call.
func checkEvents(id Identity, req any) error {
	if r, ok := req.(*pb.EventsRequest); ok && r.GetBreaker() == "" && id.Role != RoleOperator {
		return status.Errorf(codes.PermissionDenied,
			"breaker: token %q has role %s; name one breaker (the events of every breaker are for operators)", id.Name, id.Role)
	}
	return nil
}

// filterResponse drops the breakers a limited token may not see from a
// List's answer (none when the List failed: its answer is nil).
func filterResponse(id Identity, resp any) {
	if r, ok := resp.(*pb.ListResponse); ok && r != nil && id.Limited() {
		r.States = slices.DeleteFunc(r.States, func(s *pb.BreakerState) bool { return !id.MayUse(s.GetBreaker()) })
	}
}

func (a *Authenticator) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	id, ok, err := a.authorize(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if !ok {
		return h(ctx, req)
	}
	// A worker token acts only as its own workers, so one process cannot
	// make up the second worker of a quorum. BatchGet's worker_id is
	// optional: without it the call reads as the fleet.
	_, optional := req.(*pb.BatchGetRequest)
	if r, isW := req.(workerRequest); isW && !(optional && r.GetWorkerId() == "") && !id.MayActAs(r.GetWorkerId()) {
		return nil, status.Errorf(codes.PermissionDenied, "worker_id: token %q may not act as worker %s", id.Name, quote(r.GetWorkerId()))
	}
	if err := checkEvents(id, req); err != nil {
		return nil, err
	}
	if err := checkBreakers(id, req); err != nil {
		return nil, err
	}
	// A batch is checked record by record, as that many Records would be.
	if r, isB := req.(*pb.RecordBatchRequest); isB {
		for i, rec := range r.GetRecords() {
			if !id.MayActAs(rec.GetWorkerId()) {
				return nil, status.Errorf(codes.PermissionDenied, "records[%d].worker_id: token %q may not act as worker %s", i, id.Name, quote(rec.GetWorkerId()))
			}
			if err := checkBreakers(id, rec); err != nil {
				return nil, status.Errorf(codes.PermissionDenied, "records[%d].%s", i, status.Convert(err).Message())
			}
		}
	}
	// A savings report is checked report by report, as that many
	// requests naming one breaker each would be.
	if r, isS := req.(*pb.ReportSavingsRequest); isS {
		for i, rep := range r.GetReports() {
			if err := checkBreakers(id, rep); err != nil {
				return nil, status.Errorf(codes.PermissionDenied, "reports[%d].%s", i, status.Convert(err).Message())
			}
		}
	}
	// A Force is recorded under the token's name, whatever the request says.
	if r, isF := req.(*pb.ForceRequest); isF {
		r.Operator = id.Name
	}
	resp, err := h(context.WithValue(ctx, ctxKey{}, id), req)
	filterResponse(id, resp)
	return resp, err
}

func (a *Authenticator) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	id, ok, err := a.authorize(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	if !ok {
		return h(srv, ss)
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	md, _ := metadata.FromIncomingContext(ctx)
	revoked := a.endOnRevoke(ctx, md, id, cancel)
	err = h(srv, &identityStream{ServerStream: ss, ctx: context.WithValue(ctx, ctxKey{}, id), id: id})
	if revoked() {
		return status.Errorf(codes.Unauthenticated, "authorization: token %q was revoked or its entry changed (tokens reloaded); this stream has ended", id.Name)
	}
	return err
}

// endOnRevoke calls end when a Set leaves the caller's bearer token (read
// again from md) unknown, or known under another entry than id, and
// returns whether it did. It watches until ctx ends.
func (a *Authenticator) endOnRevoke(ctx context.Context, md metadata.MD, id Identity, end func()) (revoked func() bool) {
	var gone atomic.Bool
	go func() {
		// Take the channel before each check, so no Set falls between.
		for ch := a.changes(); ; {
			if now, err := a.identify(md); err != nil || !sameIdentity(now, id) {
				gone.Store(true)
				end()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-ch:
				ch = a.changes()
			}
		}
	}()
	return gone.Load
}

// sameIdentity reports whether a and b grant the same.
func sameIdentity(a, b Identity) bool {
	return a.Name == b.Name && a.Role == b.Role && slices.Equal(a.Workers, b.Workers) && slices.Equal(a.Breakers, b.Breakers)
}

// identityStream carries the identity, and checks the breakers each
// request names as the handler receives it.
type identityStream struct {
	grpc.ServerStream
	ctx context.Context
	id  Identity
}

func (s *identityStream) Context() context.Context { return s.ctx }

func (s *identityStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return checkBreakers(s.id, m)
}
