// Command breakerctl is the operator's CLI for breakerd: list and inspect
// circuits, force them open or closed, return them to automatic
// operation, watch transitions live and read the durable event log.
//
// Exit status: 0 on success; otherwise one line on stderr and
//
//	1  any other failure
//	2  a usage error (bad flag, argument or value; InvalidArgument)
//	3  unknown breaker (status of a breaker with no state and no history)
//	4  not authenticated or permission denied
//	5  breakerd unreachable, not answering in time, or unable to reach Redis
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(report(err, os.Stderr))
}

// run executes one breakerctl command line (args without the program
// name). It writes results to stdout and progress notes to stderr, and
// returns the failure, if any, for report.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	root := newRoot(getenv, stdout, stderr)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}
