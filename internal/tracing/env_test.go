package tracing

import (
	"strings"
	"testing"
)

// TestReadEnv: the daemon exports only with an OTLP endpoint set and the
// SDK not disabled, over the protocol the environment names (the traces'
// own variable first), and refuses a value it cannot use, naming its
// variable.
func TestReadEnv(t *testing.T) {
	const endpoint = "http://127.0.0.1:4318"
	for _, tc := range []struct {
		name     string
		env      map[string]string
		on       bool
		protocol string
		sampler  string // the sampler's Description, "" for the default
		err      string // a substring of the error, "" for none
	}{
		{name: "nothing set", env: nil},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, on: true, protocol: ProtocolHTTP},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint + "/v1/traces"}, on: true, protocol: ProtocolHTTP},
		{name: "disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SDK_DISABLED": "true"}},
		{name: "disabled, any case", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SDK_DISABLED": "TRUE"}},
		{name: "not disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SDK_DISABLED": "false"}, on: true, protocol: ProtocolHTTP},
		{name: "bad disabled", env: map[string]string{"OTEL_SDK_DISABLED": "yes"}, err: "OTEL_SDK_DISABLED"},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true, protocol: ProtocolGRPC},
		{name: "traces protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true, protocol: ProtocolHTTP},
		{name: "http/json is not built in", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
			err: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{name: "ratio", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"},
			on: true, protocol: ProtocolHTTP, sampler: "ParentBased{root:TraceIDRatioBased{0.01}"},
		{name: "always off", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_SAMPLER": "always_off"},
			on: true, protocol: ProtocolHTTP, sampler: "AlwaysOffSampler"},
		{name: "bad ratio", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
			err: "OTEL_TRACES_SAMPLER_ARG"},
		{name: "unknown sampler", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_SAMPLER": "jaeger_remote"},
			err: "OTEL_TRACES_SAMPLER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := ReadEnv(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ReadEnv = %v, want an error naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.On != tc.on || e.Protocol != tc.protocol {
				t.Errorf("ReadEnv = on %v over %q, want on %v over %q", e.On, e.Protocol, tc.on, tc.protocol)
			}
			got := ""
			if e.Sampler != nil {
				got = e.Sampler.Description()
			}
			if !strings.HasPrefix(got, tc.sampler) {
				t.Errorf("sampler = %q, want %q", got, tc.sampler)
			}
		})
	}
}

// TestOffInstallsNothing: without an endpoint the daemon gets no tracer,
// no gRPC interceptors and its HTTP handler unwrapped.
func TestOffInstallsNothing(t *testing.T) {
	tr, err := Start(t.Context(), Env{}, Options{})
	if err != nil || tr != nil {
		t.Fatalf("Start(off) = %v, %v; want nil, nil", tr, err)
	}
	if tr.Tracer() != nil || len(tr.ServerOptions()) != 0 || tr.Shutdown(t.Context()) != nil {
		t.Error("a nil Tracing installs something")
	}
}
