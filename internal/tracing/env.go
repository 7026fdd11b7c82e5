package tracing

import (
	"fmt"
	"strconv"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Env is what the standard OpenTelemetry environment says about the
// daemon's traces (docs/observability.md#the-daemon): whether to export
// them, over which OTLP protocol, and which spans to sample. The exporter
// reads the rest of the OTEL_EXPORTER_OTLP_* variables (endpoint, headers,
// TLS, timeout) itself.
type Env struct {
	// On: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT
	// is set, and OTEL_SDK_DISABLED is not true.
	On bool
	// Protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
	// OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" or "http/protobuf" (the default).
	Protocol string
	// Sampler is OTEL_TRACES_SAMPLER with OTEL_TRACES_SAMPLER_ARG; nil is
	// the default, parentbased_always_on.
	Sampler sdktrace.Sampler
	// Endpoint, when set, is the OTLP endpoint's URL (with its path for
	// http/protobuf), in place of the environment's: for a process that
	// runs daemons of its own (breakerbench). ReadEnv leaves it empty.
	Endpoint string
}

// Protocols an Env accepts.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// ReadEnv reads the Env from getenv. A value it cannot use is an error
// naming its variable.
func ReadEnv(getenv func(string) string) (Env, error) {
	var e Env
	disabled := strings.TrimSpace(getenv("OTEL_SDK_DISABLED"))
	if disabled != "" && !strings.EqualFold(disabled, "true") && !strings.EqualFold(disabled, "false") {
		return e, fmt.Errorf("OTEL_SDK_DISABLED=%q: want true or false", disabled)
	}
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") + getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	e.On = strings.TrimSpace(endpoint) != "" && !strings.EqualFold(disabled, "true")
	if !e.On {
		return e, nil
	}
	name, protocol := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		name, protocol = "OTEL_EXPORTER_OTLP_PROTOCOL", getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch protocol = strings.TrimSpace(protocol); protocol {
	case "", ProtocolHTTP:
		e.Protocol = ProtocolHTTP
	case ProtocolGRPC:
		e.Protocol = ProtocolGRPC
	default:
		return e, fmt.Errorf("%s=%q: want %s or %s", name, protocol, ProtocolGRPC, ProtocolHTTP)
	}
	s, err := readSampler(getenv)
	e.Sampler = s
	return e, err
}

// readSampler reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG as
// the OpenTelemetry SDK specification names them (jaeger_remote and xray
// are not built in).
func readSampler(getenv func(string) string) (sdktrace.Sampler, error) {
	name := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")))
	ratio := func() (sdktrace.Sampler, error) {
		arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
		if arg == "" {
			return sdktrace.TraceIDRatioBased(1), nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1", arg)
		}
		return sdktrace.TraceIDRatioBased(r), nil
	}
	switch name {
	case "":
		return nil, nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return ratio()
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.ParentBased(r), nil
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio or their parentbased_ forms", name)
}
