package client

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportList keeps pkg/client small and light: it
// depends only on the standard library, grpc and protobuf (with what they
// pull in), the generated stubs and the dependency-free rule packages.
// Never go-redis, YAML, or the daemon's internals.
func TestImportList(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	allowed := []string{
		"google.golang.org/grpc", "google.golang.org/protobuf", "google.golang.org/genproto/googleapis/rpc",
		"golang.org/x/net", "golang.org/x/sys", "golang.org/x/text",
		"github.com/breakerd/breakerd/proto/",
		"github.com/breakerd/breakerd/internal/breaker", "github.com/breakerd/breakerd/internal/quorum",
		"github.com/breakerd/breakerd/internal/probe", "github.com/breakerd/breakerd/internal/limits",
		"github.com/breakerd/breakerd/internal/webhook", "github.com/breakerd/breakerd/internal/classify",
		"github.com/breakerd/breakerd/internal/render", "github.com/breakerd/breakerd/conformance",
		"github.com/breakerd/breakerd/pkg/client",
		"go.opentelemetry.io/otel", "go.opentelemetry.io/auto/sdk",
		"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc",
		"github.com/go-logr/logr", "github.com/go-logr/stdr", "github.com/cespare/xxhash/v2",
	}
	for _, dep := range strings.Fields(string(out)) {
		ok := false
		for _, a := range allowed {
			if dep == a || strings.HasPrefix(dep, strings.TrimSuffix(a, "/")+"/") || strings.HasPrefix(dep, a) && strings.HasSuffix(a, "/") {
				ok = true
			}
		}
		if strings.HasPrefix(dep, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(dep, "go.opentelemetry.io/otel/exporters") {
			ok = false // the application's choice, never the client's
		}
		if !ok {
			t.Errorf("pkg/client depends on %s, which is not on its import list", dep)
		}
	}
}
