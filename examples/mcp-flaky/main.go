// Command mcp-flaky is an example upstream MCP server over stdio for
// scripts/demo-mcp.sh: its forecast tool fails (an isError result, as a
// weather API's 503 would give) while the file named by --fail-file
// exists; convert_units always works.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mcp-flaky:", err)
		os.Exit(1)
	}
}

type forecastIn struct {
	City string `json:"city" jsonschema:"the city to forecast"`
}

type convertIn struct {
	Celsius float64 `json:"celsius" jsonschema:"a temperature in degrees Celsius"`
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("mcp-flaky", flag.ContinueOnError)
	failFile := fs.String("fail-file", "", "forecast fails while this file exists")
	if err := fs.Parse(args); err != nil {
		return err
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "mcp-flaky"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "forecast", Description: "Tomorrow's weather for a city"},
		func(ctx context.Context, _ *mcp.CallToolRequest, in forecastIn) (*mcp.CallToolResult, any, error) {
			if _, err := os.Stat(*failFile); *failFile != "" && err == nil {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{
					&mcp.TextContent{Text: "weather API: HTTP 503 Service Unavailable"}}}, nil, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.City + ": 14°C, light rain"}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "convert_units", Description: "Celsius to Fahrenheit"},
		func(ctx context.Context, _ *mcp.CallToolRequest, in convertIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%.1f°F", in.Celsius*9/5+32)}}}, nil, nil
		})
	if err := srv.Run(ctx, &mcp.StdioTransport{}); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
