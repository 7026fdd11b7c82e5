// Command agent is a small agent loop on pkg/client: a scripted fake model
// and two fake tools, web_search (healthy) and refund_charge (whose payment
// vendor goes down), run by two workers of one fleet against breakerd. It
// shows the vendor's outage tripping the fleet's breaker, the tool leaving
// the next runs' toolsets (Run.Available), the words the model is given
// (Run.Notice) and what each run's final result carries (Run.Degraded).
//
//	go run ./cmd/breakerd &      # the daemon from the README, on 127.0.0.1:7070
//	go run ./examples/agent
//
// When no daemon answers at --addr, it starts an embedded one (in-memory
// Redis) in-process, with a policy that offers issue_refund_manually as
// the alternative to the payments breaker.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/breakerd/breakerd/internal/daemon"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

// The breakers the tools call through, named for their dependencies.
const (
	paymentsBreaker = "demo:payments"
	searchBreaker   = "demo:search"
)

// policyYAML is the embedded daemon's policy: the alternative the model is
// offered while payments is out.
const policyYAML = `breakers:
  - match: "demo:payments"
    alternatives: [issue_refund_manually]
`

var tools = []client.Tool{
	{Name: "web_search", Breaker: searchBreaker, Description: "Search the web.",
		Schema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`)},
	{Name: "refund_charge", Breaker: paymentsBreaker, Description: "Refund a card charge.",
		Schema: json.RawMessage(`{"type":"object","properties":{"charge_id":{"type":"string"}},"required":["charge_id"]}`)},
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:7070", "breakerd's address; an embedded daemon starts when none answers there")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	target, stop, err := daemonAt(ctx, *addr, out)
	if err != nil {
		return err
	}
	defer stop()

	// Two workers of one fleet: a breaker opens only when failures come
	// from at least two (the quorum).
	var workers []*client.Client
	for _, id := range []string{"worker-1", "worker-2"} {
		c, err := client.Dial(target, client.WithWorkerID(id), client.WithAllowBudget(time.Second))
		if err != nil {
			return err
		}
		defer c.Close()
		workers = append(workers, c)
	}
	for _, b := range []string{paymentsBreaker, searchBreaker} { // a fresh start on a reused daemon
		if _, err := workers[0].API().Force(ctx, &pb.ForceRequest{Breaker: b, Mode: pb.ForceMode_FORCE_MODE_AUTO, Operator: "agent-example"}); err != nil {
			return fmt.Errorf("reset %s: %w", b, err)
		}
	}

	search := newVendor(http.StatusOK, `{"results":["Refunds take 5-10 business days."]}`)
	defer search.Close()
	payments := newVendor(http.StatusOK, `{"refund":"re_1","status":"succeeded"}`)
	defer payments.Close()
	exec := map[string]func(context.Context) error{"web_search": search.call, "refund_charge": payments.call}

	for i := 1; i <= 5; i++ {
		if i == 2 {
			payments.status.Store(http.StatusServiceUnavailable)
			fmt.Fprintln(out, "\n*** the payment vendor goes down (HTTP 503) ***")
		}
		w := workers[(i+1)%2]
		if err := agentRun(ctx, out, i, w, exec); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\nthe payment vendor saw %d requests, the search vendor %d\n", payments.hits.Load(), search.hits.Load())
	return nil
}

// agentRun is one agent run: filter the toolset, brief the model, let it
// call tools, and print its final result.
func agentRun(ctx context.Context, out io.Writer, n int, c *client.Client, exec map[string]func(context.Context) error) error {
	run := client.NewRun(c)
	avail, err := run.Available(ctx, tools)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nrun %d on %s: tools given to the model: %s\n", n, c.WorkerID(), toolNames(avail))
	notice := run.Notice()
	if notice != "" {
		fmt.Fprintf(out, "  notice given to the model:\n%s\n", indent(notice, "    | "))
	}
	m := &model{tools: avail, notice: notice}
	for _, u := range run.Degraded() {
		m.alts = append(m.alts, u.Alternatives...)
	}
	for {
		call, ok := m.next()
		if !ok {
			break
		}
		tool := find(avail, call)
		err := run.Call(ctx, tool, exec[call])
		var result string
		switch d, denied := client.AsDenial(err, call); {
		case denied:
			result = string(d.JSON())
		case err != nil:
			result = fmt.Sprintf(`{"error":%q}`, err.Error())
		default:
			result = `{"ok":true}`
		}
		fmt.Fprintf(out, "  model calls %-13s -> %s\n", call, result)
		m.observe(call, err)
	}
	final, _ := json.MarshalIndent(struct {
		Answer   string               `json:"answer"`
		Degraded []client.Unavailable `json:"degraded,omitempty"`
	}{m.answer(), run.Degraded()}, "  ", "  ")
	fmt.Fprintf(out, "  final result: %s\n", final)
	return nil
}

// model is a scripted stand-in for an LLM: asked to refund charge ch_42 and
// explain the refund policy, it uses the tools it was given, retries a
// failing tool once, and stops trying a tool that is out of service.
type model struct {
	tools    []client.Tool
	notice   string
	tries    map[string]int
	done     map[string]bool
	refunded bool
	outage   string   // the denial's reason, once told
	alts     []string // what the breaker's policy offers instead
}

func (m *model) has(name string) bool { return find(m.tools, name).Name != "" }

func (m *model) next() (string, bool) {
	if m.tries == nil {
		m.tries, m.done = map[string]int{}, map[string]bool{}
	}
	for _, name := range []string{"refund_charge", "web_search"} {
		if m.has(name) && !m.done[name] && m.tries[name] < 2 {
			m.tries[name]++
			return name, true
		}
	}
	return "", false
}

func (m *model) observe(name string, err error) {
	if d, denied := client.AsDenial(err, name); denied {
		m.done[name], m.outage, m.alts = true, d.Reason, d.Alternatives // out of service: do not retry
		return
	}
	if err == nil {
		m.done[name] = true
		m.refunded = m.refunded || name == "refund_charge"
	}
}

func (m *model) answer() string {
	switch {
	case m.refunded:
		return "Refunded ch_42. Refunds take 5-10 business days."
	case m.notice != "" || m.outage != "":
		next := "Please try again later."
		if len(m.alts) > 0 {
			next = "Please use " + strings.Join(m.alts, " or ") + " instead."
		}
		return "I could not refund ch_42: the payments tool is out of service. " + next + " Refunds take 5-10 business days."
	}
	return "I could not refund ch_42: the payment vendor returned errors. Refunds take 5-10 business days."
}

// vendor is a fake dependency behind a tool.
type vendor struct {
	*httptest.Server
	status atomic.Int64
	hits   atomic.Int64
}

func newVendor(status int, body string) *vendor {
	v := &vendor{}
	v.status.Store(int64(status))
	v.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.hits.Add(1)
		w.WriteHeader(int(v.status.Load()))
		_, _ = io.WriteString(w, body)
	}))
	return v
}

func (v *vendor) call(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.URL, nil)
	if err != nil {
		return err
	}
	resp, err := v.Client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return client.CheckResponse(resp)
}

// daemonAt returns addr when a breakerd answers there, and otherwise the
// address of an embedded one it starts.
func daemonAt(ctx context.Context, addr string, out io.Writer) (string, func(), error) {
	c, err := client.Dial(addr)
	if err != nil {
		return "", nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = c.API().BatchGet(pctx, &pb.BatchGetRequest{Breakers: []string{paymentsBreaker}})
	cancel()
	_ = c.Close()
	if err == nil {
		fmt.Fprintf(out, "using breakerd at %s\n", addr)
		return addr, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "breakerd-agent-")
	if err != nil {
		return "", nil, err
	}
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(policyYAML), 0o600); err != nil {
		return "", nil, err
	}
	cfg, err := daemon.ParseConfig([]string{"--listen", "127.0.0.1:0", "--config", policy}, func(string) string { return "" }, io.Discard)
	if err != nil {
		return "", nil, err
	}
	dctx, stop := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(dctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(a net.Addr) { ready <- a })
	}()
	select {
	case a := <-ready:
		fmt.Fprintf(out, "no breakerd answers at %s: started an embedded one at %s (in-memory Redis)\n", addr, a)
		return a.String(), func() { stop(); <-done; _ = os.RemoveAll(dir) }, nil
	case err := <-done:
		stop()
		_ = os.RemoveAll(dir)
		return "", nil, errors.Join(errors.New("embedded breakerd"), err)
	}
}

func find(ts []client.Tool, name string) client.Tool {
	for _, t := range ts {
		if t.Name == name {
			return t
		}
	}
	return client.Tool{}
}

func toolNames(ts []client.Tool) string {
	var n []string
	for _, t := range ts {
		n = append(n, t.Name)
	}
	if len(n) == 0 {
		return "(none)"
	}
	return strings.Join(n, ", ")
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}
