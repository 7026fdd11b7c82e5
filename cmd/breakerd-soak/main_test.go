package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/breakerd/breakerd/internal/cli"
)

func TestUsage(t *testing.T) {
	none := func(string) string { return "" }
	var out bytes.Buffer
	if err := run(context.Background(), []string{"breakerd-soak", "--help"}, none, &out, &out); !errors.Is(err, cli.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if !strings.Contains(out.String(), "--failover-at") {
		t.Errorf("help lacks --failover-at:\n%s", out.String())
	}
	for _, args := range [][]string{{"--duration", "5s"}, {"--workers", "1"}, {"--call-every", "0s"}, {"--failover-at", "1"}, {"--topology", "ring"}, {"--stall-fault", "flood"}, {"--ports", "30000"}, {"--ports", "900-2000"}, {"--ports", "3000-2000"}, {"extra"}} {
		err := run(context.Background(), append([]string{"breakerd-soak"}, args...), none, &out, &out)
		var ue *cli.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	env := func(k string) string {
		if k == "BREAKERD_SOAK_DURATION" {
			return "1s"
		}
		return ""
	}
	if err := run(context.Background(), []string{"breakerd-soak"}, env, &out, &out); err == nil || !strings.Contains(err.Error(), "--duration") {
		t.Errorf("BREAKERD_SOAK_DURATION=1s: %v, want a --duration usage error", err)
	}
}
