package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/breakerd/breakerd/internal/tests/testredis"
)

// TestAgentRunsAgainstAnEmbeddedDaemon runs the example as `go run` does,
// with nothing listening at --addr, and checks the story it tells.
func TestAgentRunsAgainstAnEmbeddedDaemon(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--addr", testredis.FreeAddr(t)}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"started an embedded one",
		"run 1 on worker-1: tools given to the model: web_search, refund_charge",
		`model calls refund_charge -> {"status":"circuit_open","tool":"refund_charge","reason":"it is failing: 5 failed calls in a row`,
		`"alternatives":["issue_refund_manually"]}`,
		"run 5 on worker-1: tools given to the model: web_search\n",
		"- refund_charge: it is failing: 5 failed calls in a row",
		"In your final answer, say which parts of the task could not be done",
		`"degraded": [`,
		"the payment vendor saw 6 requests",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}
