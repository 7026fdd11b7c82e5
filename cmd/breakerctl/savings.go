package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/breakerd/breakerd/internal/policy"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func (c *cli) savingsCmd() *cobra.Command {
	var (
		window   time.Duration
		breakers []string
	)
	cmd := &cobra.Command{
		Use:   "savings [--window DURATION] [--breaker NAME]...",
		Short: "What the breakers saved over a window: calls not made, spend avoided (an estimate)",
		Long: `What the breakers saved, fleet-wide, over the last --window (1m to 7d,
default 1h): the calls the daemons denied, those clients refused in their
own process, and the tools runs left out, most calls first. A breaker whose
policy sets cost_per_call gets an estimate of the spend avoided (calls not
made times the cost). Windows up to 3h are read by the minute, longer ones
by the hour.`,
		Example: `  breakerctl savings --window 24h
  breakerctl savings --breaker web_search --json`,
		Args: noArgs,
		RunE: c.act(func(ctx context.Context, _ []string) error {
			if window < time.Minute || window > 7*24*time.Hour {
				return usageErr("--window: must be between 1m and 168h (7 days), got %s", window)
			}
			cctx, cancel := c.call(ctx)
			defer cancel()
			res, err := c.api.Savings(cctx, &pb.SavingsRequest{WindowMs: window.Milliseconds(), Breakers: breakers})
			if err != nil {
				return err
			}
			if c.json {
				return writeJSON(c.stdout, res)
			}
			return printSavings(c, window, res)
		}),
	}
	cmd.Flags().DurationVar(&window, "window", time.Hour, "how far back to read, e.g. 24h (1m to 168h)")
	cmd.Flags().StringArrayVar(&breakers, "breaker", nil, "only this breaker (repeatable); every breaker that saved anything when absent")
	return cmd
}

// printSavings prints a Savings answer as a table.
func printSavings(c *cli, window time.Duration, res *pb.SavingsResponse) error {
	c.printf("savings over %s (%s to %s)\n", window, stamp(res.GetFromMs()), stamp(res.GetToMs()))
	if len(res.GetBreakers()) == 0 {
		c.printf("nothing saved\n")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BREAKER\tDAEMON\tCLIENT\tTOOLS REMOVED\tCALLS AVOIDED\tSPEND AVOIDED (ESTIMATE)")
	for _, r := range res.GetBreakers() {
		spend := "-"
		if r.GetCurrency() != "" {
			spend = policy.Spend(r.GetSpendAvoidedEstimate(), r.GetCurrency())
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", r.GetBreaker(), r.GetDaemonDenials(), r.GetClientDenials(),
			r.GetToolsRemoved(), r.GetCallsAvoided(), spend)
	}
	var total []string
	for _, s := range res.GetSpend() {
		total = append(total, policy.Spend(s.GetSpendAvoidedEstimate(), s.GetCurrency()))
	}
	fmt.Fprintf(tw, "total\t\t\t\t%d\t%s\n", res.GetCallsAvoided(), orDash(strings.Join(total, ", ")))
	return tw.Flush()
}
