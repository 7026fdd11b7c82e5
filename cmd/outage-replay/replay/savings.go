package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/breakerd/breakerd/internal/savings"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// reportAtEnd is the savings interval of the replay's clients: longer
// than any replay, so that what they saved reaches breakerd in one report
// each, sent by checkSavings after the last run, and no periodic report
// is still on its way when breakerd's counts are read.
const reportAtEnd = 24 * time.Hour

// ErrSavings is wrapped by Report.Err when breakerd's savings counts are
// not the replay's own.
var ErrSavings = errors.New("breakerd's savings counts are not the replay's")

// SavingsCheck is one of breakerd's savings counts for a fleet arm's
// breaker (its Savings read, once every client reported) beside the same
// count derived from the replay's own: the vendors', the models'. The
// two must be equal, within Slack.
type SavingsCheck struct {
	Arm int
	// What names the count: "daemon denials" or "tools removed".
	What string
	// Got is breakerd's count; Want the replay's, as Terms derive it.
	Got, Want int64
	Terms     string
	// Slack is what Got may differ from Want by: the calls whose count
	// the replay cannot know (0 unless an RPC failed; see denialCheck).
	Slack int64
}

// OK reports whether breakerd counted what the replay did.
func (c SavingsCheck) OK() bool { return c.Got >= c.Want-c.Slack && c.Got <= c.Want+c.Slack }

// checkSavings has every fleet client report what it saved, reads
// breakerd's savings for the fleet arms' breakers and checks them
// (savingsChecks). Errors: a report or the read failing.
func (r *Report) checkSavings(ctx context.Context, clients []*client.Client) error {
	var names []string
	for _, row := range r.Rows {
		if row.Breaker != "" {
			names = append(names, row.Breaker)
		}
	}
	if len(names) == 0 || len(clients) == 0 {
		return nil
	}
	for _, c := range clients {
		if err := c.FlushSavings(ctx); err != nil {
			return fmt.Errorf("reporting the clients' savings to breakerd: %w", err)
		}
	}
	// The breakers' names are this replay's alone: the longest window
	// holds every count of theirs, whatever the daemon's clock.
	res, err := clients[0].API().Savings(ctx, &pb.SavingsRequest{WindowMs: savings.MaxWindow.Milliseconds(), Breakers: names})
	if err != nil {
		return fmt.Errorf("reading breakerd's savings: %w", err)
	}
	got := map[string]*pb.BreakerSavings{}
	for _, b := range res.GetBreakers() {
		got[b.GetBreaker()] = b
	}
	r.Savings = savingsChecks(r.Rows, got)
	return nil
}

// savingsChecks checks breakerd's counts (got, by breaker) against the
// rows: arm 5's daemon denials (denialCheck), and the tools removed of
// every fleet arm that removes a refused tool (removalCheck).
func savingsChecks(rows []Row, got map[string]*pb.BreakerSavings) []SavingsCheck {
	byArm := map[int]Row{}
	for _, row := range rows {
		byArm[row.Arm] = row
	}
	var out []SavingsCheck
	r1, ok1 := byArm[ArmNoBreaker]
	r5, ok5 := byArm[ArmFleetFailFast]
	if ok1 && ok5 && r5.Recovery != nil {
		out = append(out, denialCheck(r1, r5, got[r5.Breaker].GetDaemonDenials()))
	}
	for _, arm := range []int{ArmFleetRemove, ArmFleetRemoveCheck, ArmFleetWindow, ArmFleetSlow} {
		if row, ok := byArm[arm]; ok && row.Recovery != nil {
			out = append(out, removalCheck(row, got[row.Breaker].GetToolsRemoved()))
		}
	}
	return out
}

// denialCheck: arm 5's daemon denials are the calls its breaker kept
// from the vendor, arm 1's vendor calls less arm 5's, exactly. A probe
// is a call let out: it reached the vendor and is one of arm 5's calls,
// never a denial, so the probes need no slack. Two terms complete it:
// the tail runs, arriving after the outage while the breaker was open,
// have no twin in arm 1, so their refusals add; and a run that arm 5's
// breaker refused while the vendor answered arm 1's twin calls again
// where the twin had its results (outages that end while runs are
// arriving): those extra calls add too (0 in the incident). The one
// slack is an Allow that failed at a client (its budget ran out, or
// breakerd was away): the client's fallback decided that call, and
// breakerd may or may not have counted a denial for it.
func denialCheck(r1, r5 Row, got int64) SavingsCheck {
	tail := r5.Recovery.TailDenials
	extra := (r5.ToolCalls + r5.Denials) - (r1.ToolCalls + r1.Denials)
	terms := fmt.Sprintf("arm 1's %d vendor calls - arm 5's %d + %d refused in arm 5's tail runs", r1.Calls, r5.Calls, tail)
	switch {
	case extra > 0:
		terms += fmt.Sprintf(" + %d calls arm 5's runs made beyond arm 1's", extra)
	case extra < 0:
		terms += fmt.Sprintf(" - %d calls arm 1's runs made beyond arm 5's", -extra)
	}
	slack := r5.ClientWire.AllowErrors
	if slack > 0 {
		terms += fmt.Sprintf(", ± %d Allows that failed at the clients", slack)
	}
	return SavingsCheck{Arm: r5.Arm, What: "daemon denials", Got: got, Want: int64(r1.Calls - r5.Calls + tail + extra), Terms: terms, Slack: int64(slack)}
}

// removalCheck: an arm's tools removed, as its clients reported them
// (one per run and tool), are its runs that went without web_search, as
// their models saw it (Row.Without), the tail's included.
func removalCheck(row Row, got int64) SavingsCheck {
	rec := row.Recovery
	terms := fmt.Sprintf("arm %d's runs given no web_search: %d from their first step + %d later + %d of its tail runs",
		row.Arm, row.StartedWithout, row.Without-row.StartedWithout, rec.TailWithout)
	return SavingsCheck{Arm: row.Arm, What: "tools removed", Got: got, Want: int64(row.Without + rec.TailWithout), Terms: terms}
}

// wentWithout reports whether a run of arm went without web_search: its
// model was given its tools without it, or, in an arm that removes a
// refused tool, a call at its last step was refused.
func wentWithout(arm int, o runResult) bool {
	removes := arm == ArmPerRunRemove || arm == ArmFleetRemove || arm == ArmFleetRemoveCheck || arm == ArmFleetWindow || arm == ArmFleetSlow
	return o.goneAt > 0 || removes && o.refusedLast
}

// printSavings writes the savings checks.
func (r *Report) printSavings(b *strings.Builder) {
	if len(r.Savings) == 0 {
		return
	}
	b.WriteString("breakerd's savings counts (its Savings read, once every client reported), against the replay's own:\n")
	for _, c := range r.Savings {
		verdict := "ok"
		if !c.OK() {
			verdict = "MISMATCH"
		}
		if c.Got == c.Want {
			fmt.Fprintf(b, "  arm %d %s: %d = %s: %s\n", c.Arm, c.What, c.Got, c.Terms, verdict)
		} else {
			fmt.Fprintf(b, "  arm %d %s: %d, want %s = %d: %s\n", c.Arm, c.What, c.Got, c.Terms, c.Want, verdict)
		}
	}
}

// savingsErr wraps ErrSavings naming the checks that failed; nil when
// none did.
func (r *Report) savingsErr() error {
	var bad []string
	for _, c := range r.Savings {
		if !c.OK() {
			bad = append(bad, fmt.Sprintf("arm %d's %s: breakerd counted %d, the replay %d", c.Arm, c.What, c.Got, c.Want))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrSavings, strings.Join(bad, "; "))
}
