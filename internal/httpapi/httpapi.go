// Package httpapi serves breakerd's API as HTTP/JSON beside gRPC: every
// BreakerService RPC (POST /breakerd.v1.BreakerService/<Method>, the
// Connect protocol's unary shape) transcoded onto the daemon's gRPC server
// by connectrpc.com/vanguard, or, for a unary RPC in the clients' form,
// run in process through the same handlers and interceptors and answered
// in the same bytes (local.go), GET /healthz, GET /v1/watch, the live
// events as Server-Sent Events, and the status page's files at /ui/. A
// front handler checks the token, the content type and the body's size
// before any body is read. The page docs/http-api.md describes the API.
package httpapi

import (
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"github.com/rs/cors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/inproc"
	"github.com/breakerd/breakerd/internal/protocol"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// servicePath starts every transcoded RPC's URL path.
const servicePath = "/" + "breakerd.v1.BreakerService" + "/"

// Options configure the handler.
type Options struct {
	// GRPC is the daemon's gRPC server, carrying BreakerService: the
	// transcoder calls it (grpc.Server.ServeHTTP), so every RPC runs
	// through the same interceptors (roles, metrics) and validation.
	GRPC *grpc.Server
	// Local, when set, is BreakerService's unary methods as GRPC
	// registered them (server.InProcess): a unary RPC in the form the
	// clients send is served by calling its handler in process, through
	// the same interceptors, rather than through the transcoder and the
	// server's transport (local.go). Nil: every RPC is transcoded.
	Local *inproc.Service
	// Health answers GET /healthz.
	Health *health.Server
	// Auth checks bearer tokens; nil when the daemon runs without them.
	Auth *auth.Authenticator
	// MaxBodyBytes bounds a request body, in bytes (the daemon's
	// --max-recv-bytes); a larger one is refused unread when its
	// Content-Length says so, and cut off where it passes the bound
	// otherwise. Required.
	MaxBodyBytes int64
	// CORSOrigins are the origins a browser may call the API from ("*"
	// for any). Empty: no CORS headers, so browsers refuse cross-origin
	// calls.
	CORSOrigins []string
	// Hosts, when set, refuses a request naming a Host the daemon does
	// not answer to, and a cross-origin request that changes state whose
	// origin is not in CORSOrigins (Hosts.guard). Nil: neither check.
	Hosts *Hosts
	// Watch serves GET /v1/watch; nil leaves it out.
	Watch *Watch
	// Log receives what the handler drops (a stream's write failures).
	Log *slog.Logger
}

// New returns the HTTP/JSON API's handler.
func New(o Options) (http.Handler, error) {
	if o.MaxBodyBytes <= 0 || o.MaxBodyBytes > 1<<31 {
		return nil, fmt.Errorf("httpapi: MaxBodyBytes must be between 1 and %d, got %d", 1<<31, o.MaxBodyBytes)
	}
	tc, err := vanguard.NewTranscoder(
		[]*vanguard.Service{vanguard.NewService(pb.BreakerService_ServiceDesc.ServiceName, o.GRPC)},
		vanguard.WithCodec(newJSONCodec),
		vanguard.WithDefaultServiceOptions(
			vanguard.WithTargetProtocols(vanguard.ProtocolGRPC),
			vanguard.WithTargetCodecs(vanguard.CodecProto),
			// The transcoder buffers one message: no more than a body may be.
			vanguard.WithMaxMessageBufferBytes(uint32(o.MaxBodyBytes)),
		))
	if err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}
	f := &front{o: o}
	mux := http.NewServeMux()
	mux.Handle(servicePath, f.rpc(tc))
	mux.HandleFunc("/healthz", f.health)
	page, err := ui()
	if err != nil {
		return nil, err
	}
	mux.Handle("/ui", page)
	mux.Handle("/ui/", page)
	if o.Watch != nil {
		mux.Handle("/v1/watch", f.watch(o.Watch))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, connect.CodeNotFound, fmt.Sprintf("no such endpoint: %s %s (RPCs are POST %s<Method>)", r.Method, r.URL.Path, servicePath))
	})
	var h http.Handler = mux
	if len(o.CORSOrigins) > 0 {
		h = cors.New(cors.Options{
			AllowedOrigins: o.CORSOrigins,
			AllowedMethods: []string{http.MethodGet, http.MethodPost},
			AllowedHeaders: []string{"Authorization", "Content-Type", "Connect-Protocol-Version", "Connect-Timeout-Ms", "Last-Event-ID"},
			MaxAge:         3600,
		}).Handler(h)
	}
	if o.Hosts != nil {
		if h, err = o.Hosts.guard(h, o.CORSOrigins); err != nil {
			return nil, err
		}
	}
	return withProtocol(h), nil
}

// withProtocol marks every request's context as HTTP (protocol.From):
// one the server marked already (its BaseContext, as the daemon's does)
// passes as it is, with no copy of the request per call.
func withProtocol(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if protocol.From(r.Context()) == protocol.HTTP {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r.WithContext(protocol.With(r.Context(), protocol.HTTP)))
	})
}

// front holds the checks that run before a body is read.
type front struct{ o Options }

// isMethod reports whether name is one of the service's RPCs.
func isMethod(name string) bool {
	for _, m := range pb.BreakerService_ServiceDesc.Methods {
		if m.MethodName == name {
			return true
		}
	}
	for _, m := range pb.BreakerService_ServiceDesc.Streams {
		if m.StreamName == name {
			return true
		}
	}
	return false
}

// rpc checks a call before the transcoder reads its body: the method, the
// token, the content type and the declared size; it bounds the body as it
// is read, and rewrites error bodies (errorWriter).
func (f *front) rpc(tc http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, connect.CodeUnimplemented, "method: RPCs are POST, got "+r.Method)
			return
		}
		m := strings.TrimPrefix(r.URL.Path, servicePath)
		if !isMethod(m) {
			writeError(w, http.StatusNotFound, connect.CodeUnimplemented,
				fmt.Sprintf("method: %s has no RPC %q (see docs/http-api.md)", pb.BreakerService_ServiceDesc.ServiceName, m))
			return
		}
		if _, ok := f.identify(w, r); !ok {
			return
		}
		if v, ok := contentType(r.Header.Get("Content-Type")); !ok {
			writeError(w, http.StatusUnsupportedMediaType, connect.CodeInvalidArgument,
				"Content-Type: must be application/json, got "+v,
				violation{Field: "Content-Type", Description: "must be application/json, got " + v})
			return
		}
		if r.ContentLength > f.o.MaxBodyBytes {
			tooLarge(w, r.ContentLength, f.o.MaxBodyBytes)
			return
		}
		// One byte over the bound: the transcoder reads that far to tell a
		// body at the bound from a larger one, and refuses the latter itself.
		r.Body = http.MaxBytesReader(w, r.Body, f.o.MaxBodyBytes+1)
		// A plain JSON POST is the Connect protocol's unary call; the
		// header makes the transcoder read it so (it would take it for a
		// REST call without), so that any HTTP client can call.
		if r.Header.Get("Connect-Protocol-Version") == "" {
			r.Header.Set("Connect-Protocol-Version", "1")
		}
		if f.o.Local != nil && f.localCall(w, r, m) {
			return
		}
		ew := &errorWriter{ResponseWriter: w}
		tc.ServeHTTP(ew, r)
		ew.finish()
	})
}

// tooLarge refuses a body past the bound, unread.
func tooLarge(w http.ResponseWriter, n, max int64) {
	// The body is left unread: close the connection rather than drain it.
	w.Header().Set("Connection", "close")
	writeError(w, http.StatusRequestEntityTooLarge, connect.CodeResourceExhausted,
		fmt.Sprintf("request body is %d bytes; at most %d (--max-recv-bytes)", n, max))
}

// contentType reports whether v is a JSON content type this API takes:
// application/json (a unary call) or application/connect+json (a
// Connect streaming call, such as Watch). Refusing it, it returns v as
// the error names it.
func contentType(v string) (string, bool) {
	if v == "application/json" { // what nearly every call sends: no parse
		return "", true
	}
	mt, _, err := mime.ParseMediaType(v)
	switch {
	case err == nil && (mt == "application/json" || mt == "application/connect+json"):
		return "", true
	case err != nil && v == "":
		return "nothing", false
	}
	return fmt.Sprintf("%q", v), false
}

// identify checks the request's bearer token, when the daemon has tokens,
// and answers the refusal itself (ok false).
func (f *front) identify(w http.ResponseWriter, r *http.Request) (auth.Identity, bool) {
	if f.o.Auth == nil {
		return auth.Identity{}, true
	}
	id, err := f.o.Auth.IdentifyHeader(r.Header)
	if err != nil {
		w.Header().Set("WWW-Authenticate", "Bearer")
		writeStatus(w, err)
		return auth.Identity{}, false
	}
	return id, true
}

// writeStatus answers a gRPC status error in the errorBody form.
func writeStatus(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	code := connect.Code(st.Code())
	writeError(w, httpStatus(code), code, st.Message())
}

// httpStatus is the HTTP status the Connect protocol gives code, as the
// transcoder answers it.
func httpStatus(code connect.Code) int {
	switch code {
	case connect.CodeCanceled:
		return 499
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeOutOfRange:
		return http.StatusBadRequest
	case connect.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeAlreadyExists, connect.CodeAborted:
		return http.StatusConflict
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeResourceExhausted:
		return http.StatusTooManyRequests
	case connect.CodeUnimplemented:
		return http.StatusNotImplemented
	case connect.CodeUnavailable:
		return http.StatusServiceUnavailable
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// health answers GET /healthz[?service=NAME] from the gRPC health
// service: 200 and {"status":"SERVING"}, or 503 and NOT_SERVING; an
// unknown service is 404.
func (f *front) health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, connect.CodeUnimplemented, "method: /healthz is GET, got "+r.Method)
		return
	}
	svc := r.URL.Query().Get("service")
	res, err := f.o.Health.Check(r.Context(), &healthpb.HealthCheckRequest{Service: svc})
	if err != nil {
		writeError(w, http.StatusNotFound, connect.CodeNotFound, "service: unknown service "+fmt.Sprintf("%q", svc),
			violation{Field: "service", Description: "unknown service " + fmt.Sprintf("%q", svc)})
		return
	}
	code := http.StatusOK
	if res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		code = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprintf(w, "{\"status\":%q}\n", res.GetStatus().String())
}
