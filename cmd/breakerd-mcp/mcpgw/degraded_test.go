package mcpgw

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/breakerd/breakerd/pkg/client"
)

// TestNoBreakerdTheAgentReadsThatTheGatewayJudgedAlone: no breakerd
// answers the gateway, so pkg/client's local fallback counts the upstream
// tool's failures and trips on its own. The agent's next call of the tool
// is denied without reaching the upstream, its result carries
// "degraded": true (conformance/templates/tool_result.tmpl), the tool
// leaves tools/list, and the notice breakerd_status gives says the worker
// judged alone (conformance/templates/notice.tmpl).
func TestNoBreakerdTheAgentReadsThatTheGatewayJudgedAlone(t *testing.T) {
	t.Parallel()
	const threshold = 3
	up := newFakeUpstream()
	up.failing.Store(true)
	g := deadBreakerdGateway(t, up, client.LocalPolicy{Threshold: threshold})
	a := connectAgent(t, g)

	for i := range threshold {
		if res := a.call(t, "lookup"); !res.IsError || strings.Contains(text(res), "circuit_open") {
			t.Fatalf("lookup %d on a failing upstream = %s, want the upstream's failure", i+1, text(res))
		}
	}
	d := denial(t, a.call(t, "lookup"))
	if d.Status != "circuit_open" || d.Tool != "lookup" || !d.Degraded {
		t.Errorf("lookup after %d failures = %+v, want the fallback's circuit_open, degraded", threshold, d)
	}
	if got := up.lookups.Load(); got != threshold {
		t.Errorf("calls that reached the upstream's lookup = %d, want %d (none once the fallback denies)", got, threshold)
	}
	if got := a.tools(t); slices.Contains(got, "lookup") {
		t.Errorf("tools/list after the local trip = %v, want lookup gone", got)
	}
	var st Status
	if err := remarshal(a.call(t, StatusTool).StructuredContent, &st); err != nil {
		t.Fatal(err)
	}
	if want := degradedSentence(t); !strings.Contains(st.Notice, "- lookup: ") || !strings.Contains(st.Notice, want) {
		t.Errorf("breakerd_status's notice = %q, want lookup listed with %q", st.Notice, want)
	}
}

// deadBreakerdGateway is a gateway in front of up whose breakerd
// connection reaches nothing (port 1 refuses at once), its local fallback
// tuned by local. Its Watch loop runs until t ends; no subscription is
// awaited, since none can succeed.
func deadBreakerdGateway(t *testing.T, up *fakeUpstream, local client.LocalPolicy) *Gateway {
	t.Helper()
	conn, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return launchGateway(t, Options{
		Config: Config{Upstreams: []Upstream{{Name: "fake", Transport: up.transport(t)}}}, Conn: conn, WorkerID: "gw-1",
		ClientOptions: []client.Option{client.WithLocalPolicy(local)},
	})
}

// degradedSentence is the notice's words for a tool this worker judged
// alone: the body of the template's degraded section.
func degradedSentence(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../conformance/templates/notice.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`\{\{#degraded\}\}(.*?)\{\{/degraded\}\}`).FindSubmatch(b)
	if m == nil {
		t.Fatal("notice.tmpl has no degraded section")
	}
	return strings.TrimSpace(string(m[1]))
}
