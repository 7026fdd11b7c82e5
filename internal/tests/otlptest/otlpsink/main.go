// Command otlpsink is an OTLP/HTTP trace receiver for the Python and
// TypeScript suites: it listens on loopback, prints its endpoint (what
// OTEL_EXPORTER_OTLP_ENDPOINT names it by) as its first line of output,
// takes exports at /v1/traces and lists what it holds as JSON at GET
// /spans, one object per span:
//
//	{"service", "name", "trace_id", "span_id", "parent_span_id", "attributes": {key: value}}
//
// It runs until stdin closes or it is signalled.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/breakerd/breakerd/internal/tests/otlptest"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "otlpsink:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	rcv := &otlptest.Receiver{Endpoint: "http://" + lis.Addr().String()}
	mux := http.NewServeMux()
	mux.Handle("/v1/traces", rcv)
	mux.HandleFunc("GET /spans", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(listed(rcv.Spans()))
	})
	srv := &http.Server{Handler: mux}
	defer srv.Close()
	go func() { _ = srv.Serve(lis) }()
	go func() { // the parent's end closes stdin
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	fmt.Println(rcv.Endpoint)
	<-ctx.Done()
	return nil
}

// span is a received span as GET /spans lists it.
type span struct {
	Service      string         `json:"service"`
	Name         string         `json:"name"`
	TraceID      string         `json:"trace_id"`
	SpanID       string         `json:"span_id"`
	ParentSpanID string         `json:"parent_span_id"`
	Attributes   map[string]any `json:"attributes"`
}

func listed(spans []otlptest.Span) []span {
	out := make([]span, 0, len(spans))
	for _, s := range spans {
		attrs := map[string]any{}
		for _, kv := range s.GetAttributes() {
			attrs[kv.GetKey()] = value(kv.GetValue())
		}
		out = append(out, span{Service: s.Service, Name: s.GetName(), TraceID: s.TraceID(),
			SpanID: s.SpanID(), ParentSpanID: s.ParentID(), Attributes: attrs})
	}
	return out
}

// value is an attribute's value as JSON has it (arrays and maps as their
// text).
func value(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	default:
		return v.String()
	}
}
