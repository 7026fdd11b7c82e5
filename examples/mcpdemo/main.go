// Command mcpdemo is the agent side of scripts/demo-mcp.sh: MCP sessions,
// through the SDK's own client, on two breakerd-mcp gateways in front of
// the failing example upstream, printing what an agent sees at each step.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mcpdemo:", err)
		os.Exit(1)
	}
}

// agent is one MCP session and the list_changed notifications it got.
type agent struct {
	name    string
	cs      *mcp.ClientSession
	changed chan struct{}
}

func connect(ctx context.Context, name, url string) (*agent, error) {
	a := &agent{name: name, changed: make(chan struct{}, 16)}
	c := mcp.NewClient(&mcp.Implementation{Name: name}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { a.changed <- struct{}{} },
	})
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: connect %s: %w", name, url, err)
	}
	a.cs = cs
	return a, nil
}

func (a *agent) list(ctx context.Context) error {
	res, err := a.cs.ListTools(ctx, nil)
	if err != nil {
		return err
	}
	var names []string
	for _, t := range res.Tools {
		names = append(names, t.Name)
	}
	fmt.Printf("  %s tools/list: %s\n", a.name, strings.Join(names, ", "))
	return nil
}

func (a *agent) call(ctx context.Context, tool string, args map[string]any) (*mcp.CallToolResult, error) {
	res, err := a.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	fmt.Printf("  %s %s -> isError=%v %s\n", a.name, tool, res.IsError, b.String())
	return res, nil
}

func (a *agent) waitChanged(ctx context.Context) error {
	select {
	case <-a.changed:
		fmt.Printf("  %s <- notifications/tools/list_changed\n", a.name)
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s: no list_changed within 10s", a.name)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("mcpdemo", flag.ContinueOnError)
	gw1 := fs.String("gateway1", "http://127.0.0.1:8091/mcp", "first gateway's MCP endpoint")
	gw2 := fs.String("gateway2", "http://127.0.0.1:8092/mcp", "second gateway's MCP endpoint")
	failFile := fs.String("fail-file", "", "the upstream's forecast fails while this file exists")
	cooldown := fs.Duration("cooldown", 2*time.Second, "breakerd's cooldown (the demo waits it out)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	city := map[string]any{"city": "Lisbon"}

	fmt.Println("== two agents, one on each gateway")
	a, err := connect(ctx, "agent-A@gw-1", *gw1)
	if err != nil {
		return err
	}
	defer a.cs.Close()
	b, err := connect(ctx, "agent-B@gw-2", *gw2)
	if err != nil {
		return err
	}
	defer b.cs.Close()
	for _, x := range []*agent{a, b} {
		if err := x.list(ctx); err != nil {
			return err
		}
	}
	if _, err := a.call(ctx, "forecast", city); err != nil {
		return err
	}

	fmt.Println("\n== the weather API goes down: failures through both gateways (two workers)")
	if err := os.WriteFile(*failFile, nil, 0o600); err != nil {
		return err
	}
	for i := range 5 {
		x := a
		if i%2 == 1 {
			x = b
		}
		if _, err := x.call(ctx, "forecast", city); err != nil {
			return err
		}
	}

	fmt.Println("\n== the circuit opens: breakerd's Watch stream reaches both gateways")
	for _, x := range []*agent{a, b} {
		if err := x.waitChanged(ctx); err != nil {
			return err
		}
		if err := x.list(ctx); err != nil {
			return err
		}
	}
	fmt.Println("\n== a call to the removed tool never reaches the upstream")
	if _, err := b.call(ctx, "forecast", city); err != nil {
		return err
	}
	res, err := a.call(ctx, "breakerd_status", nil)
	if err != nil {
		return err
	}
	var st struct {
		Notice string `json:"notice"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(raw, &st)
	fmt.Printf("  notice for the model:\n    %s\n", strings.ReplaceAll(st.Notice, "\n", "\n    "))

	fmt.Printf("\n== the API recovers; after the %s cooldown a new session gets the tool back\n", *cooldown)
	if err := os.Remove(*failFile); err != nil {
		return err
	}
	time.Sleep(*cooldown + 500*time.Millisecond)
	c, err := connect(ctx, "agent-C@gw-1", *gw1)
	if err != nil {
		return err
	}
	defer c.cs.Close()
	if err := c.list(ctx); err != nil {
		return err
	}
	if _, err := c.call(ctx, "forecast", city); err != nil {
		return err
	}
	fmt.Println("  (that call was the fleet's probe: it closed the circuit)")
	if err := a.list(ctx); err != nil {
		return err
	}
	fmt.Println("  (agent-A's run planned without forecast: it does not get it back mid-run)")
	return nil
}
