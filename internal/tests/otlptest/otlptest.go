// Package otlptest is an in-process OTLP trace receiver for tests: it
// takes the spans an exporter sends over gRPC or HTTP (protobuf) and
// holds them for the test to read.
package otlptest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Receiver holds the spans exported to it. Safe for concurrent use.
type Receiver struct {
	// Endpoint is what OTEL_EXPORTER_OTLP_ENDPOINT names it by
	// (http://127.0.0.1:port).
	Endpoint string
	mu       sync.Mutex
	spans    []Span
	requests int
}

// Span is a received span with its service's name.
type Span struct {
	Service string
	*tracepb.Span
}

// TraceID is the span's trace id in hex, as trace.TraceID.String has it.
func (s Span) TraceID() string { return hex.EncodeToString(s.GetTraceId()) }

// SpanID is the span's id in hex.
func (s Span) SpanID() string { return hex.EncodeToString(s.GetSpanId()) }

// ParentID is the span's parent's id in hex ("" for a root span).
func (s Span) ParentID() string { return hex.EncodeToString(s.GetParentSpanId()) }

// Attr returns the string value of the span's attribute key ("" when it
// has none).
func (s Span) Attr(key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Requests returns how many export requests arrived.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

func (r *Receiver) take(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans = append(r.spans, Span{Service: service, Span: sp})
			}
		}
	}
}

// NewHTTP starts a receiver of OTLP/HTTP (protobuf) on loopback, closed
// when t ends.
func NewHTTP(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	r.Endpoint = srv.URL
	return r
}

// ServeHTTP takes an OTLP/HTTP (protobuf) trace export at /v1/traces.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	var in coltracepb.ExportTraceServiceRequest
	if err == nil && req.URL.Path == "/v1/traces" {
		err = proto.Unmarshal(body, &in)
	}
	if err != nil || req.URL.Path != "/v1/traces" {
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	r.take(&in)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// NewGRPC starts a receiver of OTLP/gRPC on loopback, stopped when t
// ends.
func NewGRPC(t testing.TB) *Receiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{Endpoint: "http://" + lis.Addr().String()}
	g := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(g, traceService{r: r})
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return r
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *Receiver
}

func (s traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.r.take(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}
