package mcpgw

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestTwoGatewaysShareTheFleetsBreakers walks a shared outage: two
// gateways (two workers, each on its own daemon of one Redis) in front of
// one upstream; failures from both open the tool's breaker; it leaves both
// gateways' lists with a list_changed to each session; a call to it is
// answered with circuit_open without reaching the upstream; after the
// cooldown and the upstream's recovery a new session gets it back (and
// takes the probe) while the old sessions never do.
func TestTwoGatewaysShareTheFleetsBreakers(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		up := newFakeUpstream()
		cfg := func() Config {
			return Config{Upstreams: []Upstream{{Name: "fake", Transport: up.transport(t)}}}
		}
		d1, d2 := daemontest.Start(t, b, noJitter()), daemontest.Start(t, b, noJitter())
		g1 := startGateway(t, b, dialDaemon(t, d1), "gw-1", cfg())
		g2 := startGateway(t, b, dialDaemon(t, d2), "gw-2", cfg())
		breaker := b.Prefix + "mcp:fake:lookup"

		a1, a2 := connectAgent(t, g1), connectAgent(t, g2)
		all := []string{"breakerd_status", "echo", "lookup"}
		for i, a := range []*agent{a1, a2} {
			if diff := cmp.Diff(all, sorted(a.tools(t))); diff != "" {
				t.Fatalf("agent %d tools/list before failures (-want +got):\n%s", i+1, diff)
			}
		}

		// --- failures from both gateways trip the breaker ---
		up.failing.Store(true)
		for i := range 5 {
			a := a1
			if i%2 == 1 {
				a = a2
			}
			if res := a.call(t, "lookup"); !res.IsError || text(res) != "HTTP 503 from the lookup service" {
				t.Fatalf("failing call %d = %v %q, want the upstream's isError result", i, res.IsError, text(res))
			}
		}
		if got := up.lookups.Load(); got != 5 {
			t.Fatalf("upstream lookups after 5 failing calls = %d, want 5", got)
		}
		st, err := d1.Store.Get(context.Background(), breaker)
		if err != nil {
			t.Fatal(err)
		}
		if st.GetState() != pb.State_STATE_OPEN || st.GetDistinctWorkers() != 2 {
			t.Fatalf("breaker after failures from gw-1 and gw-2 = %v with %d workers, want OPEN with 2", st.GetState(), st.GetDistinctWorkers())
		}

		// --- every session hears of it and loses the tool ---
		a1.waitChanged(t, "gw-1's session")
		a2.waitChanged(t, "gw-2's session")
		for i, a := range []*agent{a1, a2} {
			if diff := cmp.Diff([]string{"breakerd_status", "echo"}, sorted(a.tools(t))); diff != "" {
				t.Errorf("agent %d tools/list after the trip (-want +got):\n%s", i+1, diff)
			}
		}

		// --- a call to the removed tool never reaches the upstream ---
		for i, a := range []*agent{a1, a2} {
			d := denial(t, a.call(t, "lookup"))
			if d.Status != client.StatusCircuitOpen || d.Tool != "lookup" || d.Scope != "breaker" || d.Reason == "" || strings.Contains(d.Reason, breaker) {
				t.Errorf("agent %d denial = %+v, want circuit_open for lookup on %s with a reason", i+1, d, breaker)
			}
		}
		if got := up.lookups.Load(); got != 5 {
			t.Errorf("upstream lookups after two denied calls = %d, want still 5", got)
		}
		if res := a1.call(t, "echo"); res.IsError || up.echoes.Load() != 1 {
			t.Errorf("echo after the trip: isError %v, upstream echoes %d; want a result and 1", res.IsError, up.echoes.Load())
		}

		// --- the status tool says what is missing and why ---
		var status Status
		res := a1.call(t, StatusTool)
		if err := remarshal(res.StructuredContent, &status); err != nil {
			t.Fatal(err)
		}
		if len(status.Missing) != 1 || status.Missing[0].Tool != "lookup" || status.Notice == "" {
			t.Errorf("breakerd_status = %+v, want lookup missing with a notice", status)
		}

		// --- recovery: the cooldown passes, the upstream works again ---
		up.failing.Store(false)
		b.Advance(policyCooldown + time.Millisecond)
		fresh := connectAgent(t, g1)
		if diff := cmp.Diff(all, sorted(fresh.tools(t))); diff != "" {
			t.Fatalf("new session's tools/list once the probe is due (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"breakerd_status", "echo"}, sorted(a1.tools(t))); diff != "" {
			t.Errorf("old session's tools/list once the probe is due (-want +got):\n%s", diff)
		}
		// Listing judged the tools with BatchGet: no probe lease was taken,
		// and the upstream has not been called.
		if st, _ := d1.Store.Get(context.Background(), breaker); st.GetState() != pb.State_STATE_OPEN || st.GetProbeInFlight() {
			t.Errorf("breaker after listing with its probe due = %v (probe in flight %v), want OPEN with no probe", st.GetState(), st.GetProbeInFlight())
		}
		if got := up.lookups.Load(); got != 5 {
			t.Errorf("upstream lookups before the first real call after the cooldown = %d, want still 5", got)
		}
		if res := fresh.call(t, "lookup"); res.IsError {
			t.Fatalf("the new session's probe call: isError, %s", text(res))
		}
		if got := up.lookups.Load(); got != 6 {
			t.Errorf("upstream lookups after the probe = %d, want 6", got)
		}
		if st, _ := d2.Store.Get(context.Background(), breaker); st.GetState() != pb.State_STATE_CLOSED {
			t.Errorf("breaker after the successful probe = %v, want CLOSED", st.GetState())
		}
		// The probe's own half-open event did not take the tool from the
		// session that probed.
		if diff := cmp.Diff(all, sorted(fresh.tools(t))); diff != "" {
			t.Errorf("the probing session's tools/list after its probe (-want +got):\n%s", diff)
		}
		var fst Status
		if err := remarshal(fresh.call(t, StatusTool).StructuredContent, &fst); err != nil {
			t.Fatal(err)
		}
		if len(fst.Missing) != 0 {
			t.Errorf("the probing session's breakerd_status after its probe: missing %+v, want none", fst.Missing)
		}
		later := connectAgent(t, g2)
		if diff := cmp.Diff(all, sorted(later.tools(t))); diff != "" {
			t.Errorf("a session started after recovery (-want +got):\n%s", diff)
		}
		for i, a := range []*agent{a1, a2} {
			if slices.Contains(a.tools(t), "lookup") {
				t.Errorf("agent %d (started before the trip) lists lookup again", i+1)
			}
			if d := denial(t, a.call(t, "lookup")); d.Status != client.StatusCircuitOpen {
				t.Errorf("agent %d call after recovery: %+v, want its session's circuit_open", i+1, d)
			}
		}
		if got := up.lookups.Load(); got != 6 {
			t.Errorf("upstream lookups after old sessions' calls = %d, want still 6", got)
		}
	})
}

// policyCooldown is noJitter's first cooldown.
const policyCooldown = 30 * time.Second

func sorted(v []string) []string { return slices.Sorted(slices.Values(v)) }

// TestConcurrentSessionsDuringATrip: sessions on two gateways call the
// failing tool at once while its breaker trips. Every call either reached
// the upstream (and the agent saw the upstream's own result) or was denied
// without reaching it; every session loses the tool and is told so once
// it has. A gateway whose failures reach the threshold before the other's
// first one is isolated meanwhile (worker_isolated, as the breaker's rules
// say): on a busy machine one gateway's sessions may run well ahead.
func TestConcurrentSessionsDuringATrip(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		up := newFakeUpstream()
		up.failing.Store(true)
		cfg := Config{Upstreams: []Upstream{{Name: "fake", Transport: up.transport(t)}}}
		d := daemontest.Start(t, b, noJitter())
		gws := []*Gateway{
			startGateway(t, b, dialDaemon(t, d), "gw-1", cfg),
			startGateway(t, b, dialDaemon(t, d), "gw-2", cfg),
		}
		var agents []*agent
		for i := range 6 {
			agents = append(agents, connectAgent(t, gws[i%2]))
		}
		const calls = 8
		var wg sync.WaitGroup
		var reached, denied atomic.Int64
		for _, a := range agents {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range calls {
					res, err := a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "lookup", Arguments: map[string]any{}})
					switch {
					case err != nil:
						t.Errorf("CallTool: %v", err)
						return
					case text(res) == "HTTP 503 from the lookup service":
						reached.Add(1)
					case strings.Contains(text(res), `"status":"circuit_open"`), strings.Contains(text(res), `"status":"probe_in_flight"`),
						strings.Contains(text(res), `"status":"worker_isolated"`):
						denied.Add(1)
					default:
						t.Errorf("lookup = %q, want the upstream's failure or a denial", text(res))
					}
				}
			}()
		}
		wg.Wait()
		if got := up.lookups.Load(); got != reached.Load() {
			t.Errorf("upstream lookups = %d, calls that saw the upstream's answer = %d: want equal", got, reached.Load())
		}
		if reached.Load()+denied.Load() != int64(len(agents)*calls) || denied.Load() == 0 {
			t.Errorf("reached %d + denied %d, want %d calls with some denied", reached.Load(), denied.Load(), len(agents)*calls)
		}
		for i, a := range agents {
			a.waitChanged(t, fmt.Sprintf("agent %d", i))
			if slices.Contains(a.tools(t), "lookup") {
				t.Errorf("agent %d still lists lookup after the trip", i)
			}
		}
	})
}

// TestForcedOpenByAnOperator: an operator's Force reaches the session
// through Watch; the tool leaves its list and a call says who forced it
// and why, without reaching the upstream.
func TestForcedOpenByAnOperator(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d := daemontest.Start(t, b, noJitter())
	up := newFakeUpstream()
	conn := dialDaemon(t, d)
	g := startGateway(t, b, conn, "gw-1", Config{Upstreams: []Upstream{{Name: "fake", Transport: up.transport(t)}}})
	a := connectAgent(t, g)
	if !slices.Contains(a.tools(t), "lookup") {
		t.Fatal("lookup not listed before the force")
	}
	_, err := pb.NewBreakerServiceClient(conn).Force(context.Background(), &pb.ForceRequest{
		Breaker: b.Prefix + "mcp:fake:lookup", Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "vendor maintenance", Operator: "ana"})
	if err != nil {
		t.Fatal(err)
	}
	a.waitChanged(t, "the session")
	if got := sorted(a.tools(t)); strings.Join(got, ",") != "breakerd_status,echo" {
		t.Errorf("tools/list after the force = %v, want breakerd_status, echo", got)
	}
	d1 := denial(t, a.call(t, "lookup"))
	if !d1.Forced || !strings.Contains(d1.Reason, "vendor maintenance") {
		t.Errorf("denial = %+v, want forced with the operator's reason", d1)
	}
	if got := up.lookups.Load(); got != 0 {
		t.Errorf("upstream lookups = %d, want 0", got)
	}
}
