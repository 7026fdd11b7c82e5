package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// listStates maps list's --state values to the API's states.
var listStates = map[string][]pb.State{
	"closed":        {pb.State_STATE_CLOSED},
	"open":          {pb.State_STATE_OPEN},
	"half_open":     {pb.State_STATE_HALF_OPEN},
	"forced":        {pb.State_STATE_FORCED_OPEN, pb.State_STATE_FORCED_CLOSED},
	"forced_open":   {pb.State_STATE_FORCED_OPEN},
	"forced_closed": {pb.State_STATE_FORCED_CLOSED},
	"paused":        {pb.State_STATE_PAUSED},
}

func (c *cli) listCmd() *cobra.Command {
	var states []string
	var pageSize int32
	cmd := &cobra.Command{
		Use:   "list [--state STATE]...",
		Short: "List every breaker that holds state",
		Long: `List every breaker that holds state, fleet-wide, sorted by name: its
state, generation, consecutive failures and distinct workers, when it
opened and when its next probe is due (relative to the Redis clock), and
why it is open or forced.

A breaker in shadow mode (its policy's shadow, or "breakerctl shadow") is
closed, as enforced, with the state it would be in beside it: "closed
(shadow: open)". --state filters on the state enforced.

A closed breaker with no failures holds no state and is not listed.

--state keeps only breakers in the given states; repeat it or separate
values with commas: closed, open, half_open, forced (forced_open and
forced_closed), forced_open, forced_closed, paused (a revoked credential
waiting for an operator).

It reads the list in pages (--page-size keys per call, each call bounded
by --timeout), so a fleet of any size is listed without one long call.`,
		Example: `  breakerctl list
  breakerctl list --state open,half_open
  breakerctl list --state forced --json | jq -r '.[].breaker'`,
		Args: noArgs,
		RunE: c.act(func(ctx context.Context, _ []string) error {
			req := &pb.ListRequest{}
			for _, s := range states {
				ps, ok := listStates[s]
				if !ok {
					return usageErr("--state: unknown state %q (want closed, open, half_open, forced, forced_open, forced_closed or paused)", s)
				}
				req.States = append(req.States, ps...)
			}
			if pageSize < 1 || pageSize > 1000 {
				return usageErr("--page-size: must be 1 to 1000, got %d", pageSize)
			}
			req.PageSize = pageSize
			sts, err := c.listAll(ctx, req)
			if err != nil {
				return err
			}
			return c.printList(sts, states)
		}),
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "only these states: closed, open, half_open, forced, forced_open, forced_closed, paused")
	cmd.Flags().Int32Var(&pageSize, "page-size", 500, "keys breakerd examines per call (1 to 1000); the list is read in as many calls as it takes")
	return cmd
}

// listAll reads every page of req's list, sorted by name, each breaker
// once (a page boundary can repeat a breaker: Redis SCAN).
func (c *cli) listAll(ctx context.Context, req *pb.ListRequest) ([]*pb.BreakerState, error) {
	sts, err := client.ListEvery(ctx, c.api, req, c.timeout)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(sts, func(a, b *pb.BreakerState) int { return strings.Compare(a.GetBreaker(), b.GetBreaker()) })
	return sts, nil
}

// printList prints list's answer: JSON with --json, else a table (states
// are the --state filters asked, for the empty answer's words).
func (c *cli) printList(sts []*pb.BreakerState, states []string) error {
	if c.json {
		out := make([]stateView, 0, len(sts))
		for _, s := range sts {
			out = append(out, viewState(s))
		}
		return writeJSON(c.stdout, out)
	}
	if len(sts) == 0 {
		c.printf("no breakers%s\n", map[bool]string{true: " in state " + strings.Join(states, ", "), false: " hold state"}[len(states) > 0])
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BREAKER\tSTATE\tGEN\tFAILURES\tSLOW\tWORKERS\tOPENED\tNEXT PROBE\tREASON")
	for _, s := range sts {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\n", s.GetBreaker(), stateCell(s), s.GetGeneration(),
			failuresCell(s), slowCell(s), s.GetDistinctWorkers(), ago(s.GetOpenedAtMs(), s.GetAsOfMs()),
			due(s.GetNextProbeAtMs(), s.GetAsOfMs()), reasonCell(s))
	}
	return tw.Flush()
}

// reasonCell is list's REASON column: the state's reason, or for a closed
// breaker whose trip its group's open-fraction cap stopped, that.
func reasonCell(s *pb.BreakerState) string {
	if s.GetReason() == "" && s.GetOpenFractionCapped() {
		return "trip stopped by the open-fraction cap of group " + s.GetGroup()
	}
	return orDash(s.GetReason())
}

// failuresCell is list's FAILURES column: the failure run in consecutive
// mode; in window mode, while closed, the window's failures over its
// calls ("1/3 in window"), since the run is not what trips it. Once a
// window breaker has tripped its window starts empty, so the column shows
// the failures that tripped it, as in consecutive mode.
func failuresCell(s *pb.BreakerState) string {
	if s.GetWindowMode() && machineState(s) == pb.State_STATE_CLOSED {
		return fmt.Sprintf("%d/%d in window", s.GetWindowFailures(), s.GetWindowCalls())
	}
	return strconv.FormatInt(s.GetFailures(), 10)
}

// machineState is the state the breaker's machine is in: in shadow mode
// the shadow state (the enforced one is closed), else its state. The
// counts beside it (a window, a run, a trip's failures) follow the
// machine.
func machineState(s *pb.BreakerState) pb.State {
	if s.GetShadow() {
		return s.GetShadowState()
	}
	return s.GetState()
}

// slowCell is list's SLOW column: "-" for a policy that counts no slow
// calls; else, while closed, the slow run (consecutive mode) or the
// window's slow calls, and the limit ("2 over 2s"). After a trip the
// FAILURES and WORKERS columns hold what tripped it.
func slowCell(s *pb.BreakerState) string {
	if s.GetSlowCallMs() <= 0 {
		return "-"
	}
	if machineState(s) != pb.State_STATE_CLOSED {
		return "-"
	}
	return fmt.Sprintf("%d over %s", s.GetSlowCalls(), time.Duration(s.GetSlowCallMs())*time.Millisecond)
}

func (c *cli) statusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status BREAKER",
		Short: "Show one breaker's state and its last event",
		Long: `Show one breaker's state: state, generation, consecutive failures and
distinct workers, when it opened, when its next probe is due, its
cooldown, why it is open or forced, the last counted failure, who forced
it and until when, and its last event from the durable log.

Unknown breakers: breakerd has no registry of names (a breaker exists as
soon as a worker asks about it), so status calls a breaker unknown when it
holds no stored state (closed, generation 0, no failures) and has no
event history. That is a typo or a breaker nobody has used (or one idle
for longer than the event retention); status then exits with status 3.
A breaker that recovered and went quiet still has its history and is
shown as closed.`,
		Example: `  breakerctl status web_search
  breakerctl status stripe:acct_42 --json | jq .next_probe_at_ms`,
		Args: oneBreaker,
		RunE: c.act(func(ctx context.Context, args []string) error {
			name := args[0]
			cctx, cancel := c.call(ctx)
			defer cancel()
			res, err := c.api.Get(cctx, &pb.GetRequest{Breaker: name})
			if err != nil {
				return err
			}
			// The last event is an operator's read: a worker token may
			// still see the state, without it.
			evs, err := c.api.Events(cctx, &pb.EventsRequest{Breaker: name, Limit: 1})
			if err != nil && status.Code(err) != codes.PermissionDenied {
				return err
			}
			s := res.GetState()
			var last *pb.Event
			if n := len(evs.GetEvents()); n > 0 {
				last = evs.GetEvents()[n-1]
			}
			if last == nil && s.GetGeneration() == 0 && s.GetFailures() == 0 && s.GetWindowCalls() == 0 && s.GetSlowCalls() == 0 && s.GetState() == pb.State_STATE_CLOSED {
				return &exitError{code: exitUnknown, msg: fmt.Sprintf("unknown breaker %q: no stored state and no event history", name)}
			}
			if c.json {
				v := viewState(s)
				if last != nil {
					ev := events.ViewOf(last)
					v.LastEvent = &ev
				}
				return writeJSON(c.stdout, v)
			}
			return printStatus(c.stdout, s, last)
		}),
	}
}

func printStatus(w io.Writer, s *pb.BreakerState, last *pb.Event) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	at := func(ms int64) string {
		if ms == 0 {
			return "-"
		}
		return stamp(ms) + " (" + ago(ms, s.GetAsOfMs()) + ")"
	}
	row("breaker", s.GetBreaker())
	row("state", stateCell(s))
	switch set := shadowSettingName(s.GetShadowSetting()); {
	case set != "":
		row("shadow", set+" (set by an operator; breakerctl shadow "+s.GetBreaker()+" policy returns it to its policy)")
	case s.GetShadow():
		row("shadow", "on (the policy's shadow: Allow always allows; transitions are recorded, not enforced)")
	}
	row("generation", fmt.Sprint(s.GetGeneration()))
	row("failures", fmt.Sprint(s.GetFailures()))
	row("distinct workers", fmt.Sprint(s.GetDistinctWorkers()))
	row("opened at", at(s.GetOpenedAtMs()))
	if ms := s.GetNextProbeAtMs(); ms > 0 {
		row("next probe at", stamp(ms)+" ("+due(ms, s.GetAsOfMs())+")")
	} else {
		row("next probe at", at(ms))
	}
	row("cooldown", dur(s.GetCooldownMs()))
	row("probe in flight", map[bool]string{true: "yes", false: "no"}[s.GetProbeInFlight()])
	row("failed probes", fmt.Sprint(s.GetFailedProbes()))
	if n := s.GetWindowCalls(); n > 0 { // window mode
		row("window", fmt.Sprintf("%d calls, %d failed (%d%%)", n, s.GetWindowFailures(), s.GetWindowFailures()*100/n))
	}
	// The slow run, where the policy counts one and it is running: a trip
	// starts it afresh, and then the reason tells why the circuit opened.
	if lim := s.GetSlowCallMs(); lim > 0 && (s.GetState() == pb.State_STATE_CLOSED && (!s.GetShadow() || s.GetShadowState() == pb.State_STATE_CLOSED) ||
		s.GetState() == pb.State_STATE_FORCED_CLOSED) {
		row("slow calls", fmt.Sprintf("%d slower than %s", s.GetSlowCalls(), dur(lim)))
	}
	if g := s.GetGroup(); g != "" {
		row("group", fmt.Sprintf("%s: %d of %d members open, %d holding state (max_open_fraction %v)", g, s.GetGroupOpen(), s.GetGroupMembers(), s.GetGroupKnown(), s.GetMaxOpenFraction()))
	}
	if s.GetOpenFractionCapped() {
		row("open-fraction cap", "a trip was stopped: the trip rule was met, but the group was at its cap; the breaker stays closed until a success ends its run or the group has room")
	}
	reason := s.GetReason()
	if reason == "" && last != nil {
		reason = last.GetReason()
	}
	row("last reason", orDash(reason))
	row("last failure", orDash(s.GetLastFailure()))
	if s.GetSuspectWorker() != "" && s.GetSuspectUntilMs() > s.GetAsOfMs() {
		row("suspect worker", s.GetSuspectWorker()+" (denied alone until "+at(s.GetSuspectUntilMs())+")")
	}
	if s.GetForcedBy() != "" {
		row("forced by", s.GetForcedBy())
		until := "until breakerctl auto"
		if s.GetForcedUntilMs() > 0 {
			until = at(s.GetForcedUntilMs())
		}
		row("forced until", until)
	}
	if len(s.GetAlternatives()) > 0 {
		row("alternatives", strings.Join(s.GetAlternatives(), ", "))
	}
	if s.GetParent() != "" {
		row("parent", s.GetParent()+" (an open parent denies this breaker: breakerctl status "+s.GetParent()+")")
	}
	if last != nil {
		row("last event", fmt.Sprintf("%s %s %s by %s (%s ago)", stamp(last.GetAtMs()), kindCell(last),
			arrow(last), orDash(last.GetActor()), strings.TrimSuffix(ago(last.GetAtMs(), s.GetAsOfMs()), " ago")))
	}
	return tw.Flush()
}

// forceCmd builds force-open (verb "open") and force-close ("close").
func (c *cli) forceCmd(verb string) *cobra.Command {
	var reason string
	var ttl time.Duration
	mode, pinned, effect := pb.ForceMode_FORCE_MODE_OPEN, "open", "every Allow is denied with your reason (DENIED_FORCED_OPEN)"
	if verb == "close" {
		mode, pinned, effect = pb.ForceMode_FORCE_MODE_CLOSED, "closed", "every Allow is allowed and the breaker never trips (outcomes are still counted)"
	}
	cmd := &cobra.Command{
		Use:   "force-" + verb + " BREAKER --reason TEXT [--ttl DURATION]",
		Short: "Pin a breaker " + pinned + " on an operator's word",
		Long: fmt.Sprintf(`Pin a breaker %s fleet-wide: %s.
Automatic transitions never override it. It lasts until "breakerctl auto
BREAKER", or until --ttl has passed (then the breaker returns to
automatic operation, closed with fresh counts, by itself).

--reason is required and is shown to every caller and recorded in the
event log with the operator (--operator, env BREAKERCTL_OPERATOR, else
$USER). Forcing a breaker nobody has used yet is allowed.`, pinned, effect),
		Example: fmt.Sprintf(`  breakerctl force-%s web_search --reason "vendor maintenance until 14:00" --ttl 30m
  breakerctl force-%s stripe:acct_42 --reason "INC-1234" --json`, verb, verb),
		Args: oneBreaker,
		RunE: c.act(func(ctx context.Context, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return usageErr("--reason: is required")
			}
			if ttl < 0 {
				return usageErr("--ttl: must not be negative, got %s", ttl)
			}
			return c.force(ctx, args[0], mode, reason, ttl)
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, in plain words (required): shown to every denied caller")
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "end the pin by itself after this long, e.g. 10m (0: until breakerctl auto)")
	c.operatorFlag(cmd)
	return cmd
}

func (c *cli) autoCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "auto BREAKER [--reason TEXT]",
		Short: "Return a breaker to automatic operation",
		Long: `Return a breaker to automatic operation: it ends a forced state and
leaves the breaker closed with fresh counts (an open circuit closes too).
The optional --reason is recorded in the event log.`,
		Example: `  breakerctl auto web_search
  breakerctl auto web_search --reason "vendor confirmed the fix"`,
		Args: oneBreaker,
		RunE: c.act(func(ctx context.Context, args []string) error {
			return c.force(ctx, args[0], pb.ForceMode_FORCE_MODE_AUTO, reason, 0)
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, in plain words (optional)")
	c.operatorFlag(cmd)
	return cmd
}

func (c *cli) shadowCmd() *cobra.Command {
	var reason string
	settings := map[string]pb.ShadowSetting{"on": pb.ShadowSetting_SHADOW_SETTING_ON,
		"off": pb.ShadowSetting_SHADOW_SETTING_OFF, "policy": pb.ShadowSetting_SHADOW_SETTING_POLICY}
	cmd := &cobra.Command{
		Use:   "shadow BREAKER on|off|policy [--reason TEXT]",
		Short: "Set a breaker's shadow mode: on, off, or as its policy says",
		Long: `Set one breaker's shadow mode, fleet-wide, overriding its policy's
shadow field either way:

  on      shadow: every decision is computed and every transition
          recorded as an event marked shadow ("would have opened"), but
          Allow always allows (the answer says what enforced mode would
          have done). For tuning a policy on real traffic.
  off     enforced, whatever the policy says.
  policy  follow the policy's shadow field again (the default).

The breaker's state is kept as it is: turning shadow off on a breaker
that would be open enforces it, open, at once (status shows the shadow
state first; "breakerctl auto" starts it afresh). A pin (force-open,
force-close) still wins over shadow mode. The setting lasts until an
operator changes it; auto keeps it.

--reason is required for on and off and is recorded in the event log
with the operator.`,
		Example: `  breakerctl shadow web_search on --reason "tuning threshold 3 on real traffic"
  breakerctl shadow web_search off --reason "enforcing after a week of shadow"
  breakerctl shadow web_search policy`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageErr("want a breaker and on, off or policy, got %d arguments", len(args))
			}
			if err := oneBreaker(cmd, args[:1]); err != nil {
				return err
			}
			if _, ok := settings[args[1]]; !ok {
				return usageErr("unknown shadow setting %q (want on, off or policy)", args[1])
			}
			return nil
		},
		RunE: c.act(func(ctx context.Context, args []string) error {
			set := settings[args[1]]
			if set != pb.ShadowSetting_SHADOW_SETTING_POLICY && strings.TrimSpace(reason) == "" {
				return usageErr("--reason: is required for shadow %s", args[1])
			}
			cctx, cancel := c.call(ctx)
			defer cancel()
			res, err := c.api.Force(cctx, &pb.ForceRequest{Breaker: args[0], Mode: pb.ForceMode_FORCE_MODE_SHADOW,
				Shadow: set, Reason: reason, Operator: c.operatorName()})
			if err != nil {
				return err
			}
			s := res.GetState()
			if c.json {
				return writeJSON(c.stdout, viewState(s))
			}
			mode := "enforced"
			if s.GetShadow() {
				mode = "shadowed (Allow always allows)"
			}
			c.printf("%s: shadow %s: %s, %s (generation %d)\n", args[0], args[1], mode, stateCell(s), s.GetGeneration())
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, in plain words (required for on and off): recorded in the event log")
	c.operatorFlag(cmd)
	return cmd
}

func (c *cli) operatorFlag(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.operator, "operator", "", "who is forcing, recorded in the event (env BREAKERCTL_OPERATOR, else $USER); a daemon with --tokens records the token's name instead")
}

// operatorName is who is forcing: --operator, env BREAKERCTL_OPERATOR,
// $USER, else "operator".
func (c *cli) operatorName() string {
	op := c.operator
	for _, v := range []string{c.getenv("BREAKERCTL_OPERATOR"), c.getenv("USER"), "operator"} {
		if op == "" {
			op = v
		}
	}
	return op
}

func (c *cli) force(ctx context.Context, name string, mode pb.ForceMode, reason string, ttl time.Duration) error {
	op := c.operatorName()
	cctx, cancel := c.call(ctx)
	defer cancel()
	res, err := c.api.Force(cctx, &pb.ForceRequest{Breaker: name, Mode: mode, Reason: reason, TtlMs: ttl.Milliseconds(), Operator: op})
	if err != nil {
		return err
	}
	s := res.GetState()
	if c.json {
		return writeJSON(c.stdout, viewState(s))
	}
	switch mode {
	case pb.ForceMode_FORCE_MODE_AUTO:
		c.printf("%s: back to automatic operation, %s (generation %d)\n", name, breaker.EnumName(s.GetState()), s.GetGeneration())
	default:
		until := "until breakerctl auto"
		if s.GetForcedUntilMs() > 0 {
			until = "until " + stamp(s.GetForcedUntilMs()) + " (" + ttl.String() + ")"
		}
		c.printf("%s: %s by %s %s (generation %d): %s\n", name, breaker.EnumName(s.GetState()), s.GetForcedBy(), until, s.GetGeneration(), s.GetReason())
	}
	return nil
}

func (c *cli) watchCmd() *cobra.Command {
	var breakers []string
	cmd := &cobra.Command{
		Use:   "watch [--breaker NAME]...",
		Short: "Print transitions, forces and alerts live, fleet-wide",
		Long: `Print every transition, force and alert as it happens, fleet-wide (from
every daemon on the same Redis), until interrupted (Ctrl-C exits 0). It
prints nothing from the past: "breakerctl events" reads the history.

Once the subscription is live a note goes to stderr; each event is one
line on stdout (one JSON object per line with --json). If this watcher
falls too far behind, or the daemon stops, watch exits non-zero: run it
again and resync with "breakerctl list".`,
		Example: `  breakerctl watch
  breakerctl watch --breaker web_search --breaker stripe:acct_42
  breakerctl watch --json | jq -c 'select(.to == "open")'`,
		Args: noArgs,
		RunE: c.act(func(ctx context.Context, _ []string) error {
			stream, err := c.api.Watch(ctx, &pb.WatchRequest{Breakers: breakers})
			if err != nil {
				return err
			}
			if _, err := stream.Header(); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			fmt.Fprintf(c.stderr, "watching %s on %s (Ctrl-C to stop)\n", orAll(breakers), c.addr)
			for {
				m, err := stream.Recv()
				if err != nil {
					if ctx.Err() != nil || status.Code(err) == codes.Canceled {
						return nil
					}
					if errors.Is(err, io.EOF) {
						return &exitError{code: exitFailure, msg: "breakerd ended the watch"}
					}
					return err
				}
				e := m.GetEvent()
				if e == nil {
					continue // a heartbeat
				}
				if c.json {
					if err := writeCompactJSON(c.stdout, events.ViewOf(e)); err != nil {
						return err
					}
					continue
				}
				c.printf("%s\n", eventLine(e))
			}
		}),
	}
	cmd.Flags().StringSliceVar(&breakers, "breaker", nil, "only these breakers (repeat or separate with commas); all when absent")
	return cmd
}

func orAll(breakers []string) string {
	if len(breakers) == 0 {
		return "every breaker"
	}
	return strings.Join(breakers, ", ")
}

// eventLine is one event as watch prints it.
func eventLine(e *pb.Event) string {
	line := fmt.Sprintf("%s  %s  %s  %s  gen %d  by %s", stamp(e.GetAtMs()), e.GetBreaker(), kindCell(e),
		arrow(e), e.GetGeneration(), orDash(e.GetActor()))
	if e.GetCooldownMs() > 0 {
		line += "  cooldown " + dur(e.GetCooldownMs())
	}
	return line + "  " + e.GetReason()
}

func (c *cli) eventsCmd() *cobra.Command {
	var (
		breaker string
		since   time.Duration
		limit   int32
	)
	cmd := &cobra.Command{
		Use:   "events [--since DURATION] [--breaker NAME] [--limit N]",
		Short: "Read the durable event log",
		Long: `Read the durable event log, oldest first: every transition, force and
alert of one breaker (--breaker), or of every breaker merged by time (an
operator's token: a worker's names one breaker).

--since keeps events at most that old, measured on the Redis clock (so a
skewed laptop clock does not matter); 0, the default, reads everything the
log keeps (each breaker keeps about --events-max-len entries for
--event-retention after its last event). --limit keeps the most recent N
(default 100, at most 10000).`,
		Example: `  breakerctl events --since 1h
  breakerctl events --breaker web_search --limit 20
  breakerctl events --since 24h --json | jq -r '.[] | select(.kind == "forced") | .actor'`,
		Args: noArgs,
		RunE: c.act(func(ctx context.Context, _ []string) error {
			if since < 0 {
				return usageErr("--since: must not be negative, got %s", since)
			}
			if limit < 1 || limit > 10000 {
				return usageErr("--limit: must be between 1 and 10000, got %d", limit)
			}
			cctx, cancel := c.call(ctx)
			defer cancel()
			res, err := c.api.Events(cctx, &pb.EventsRequest{Breaker: breaker, SinceMs: since.Milliseconds(), Limit: limit})
			if err != nil {
				return err
			}
			evs := res.GetEvents()
			if c.json {
				out := make([]events.View, 0, len(evs))
				for _, e := range evs {
					out = append(out, events.ViewOf(e))
				}
				return writeJSON(c.stdout, out)
			}
			if len(evs) == 0 {
				c.printf("no events\n")
				return nil
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tBREAKER\tKIND\tCHANGE\tGEN\tBY\tREASON")
			for _, e := range evs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", stamp(e.GetAtMs()), e.GetBreaker(), kindCell(e),
					arrow(e), e.GetGeneration(), orDash(e.GetActor()), e.GetReason())
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().StringVar(&breaker, "breaker", "", "only this breaker's events; every breaker's when absent")
	cmd.Flags().DurationVar(&since, "since", 0, "only events at most this old, e.g. 1h (0: all the log keeps)")
	cmd.Flags().Int32Var(&limit, "limit", 100, "at most this many events, the most recent")
	return cmd
}
