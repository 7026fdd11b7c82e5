package replay

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// DefaultSweepCheck is the recovery check interval a sweep uses when the
// Config names none.
const DefaultSweepCheck = 30 * time.Second

// Targets of a recovery check, which a sweep reports as met or
// missed: half-open within HalfOpenTarget of the vendor's recovery at the
// daemon, the first successful probe within ProbeTarget of it, at most
// MaxChecksPerMinute status requests in any minute, fleet-wide.
const (
	HalfOpenTarget     = 35 * time.Second
	ProbeTarget        = 60 * time.Second
	MaxChecksPerMinute = 2
)

// SweepRow is one outage length of a sweep: arm 4 (Without a check) and
// arm 6 (With one), after the vendor recovered.
type SweepRow struct {
	Outage        time.Duration
	Without, With Recovery
}

// Sweep replays the outage at each length in outages, running only arm 4
// and arm 6 (arm 4 with a recovery check every cfg.RecoveryCheck, or
// DefaultSweepCheck), one replay after another. progress, when set, gets
// a line per finished replay. Errors are Replay's, and a savings check
// that failed (ErrSavings).
func Sweep(ctx context.Context, cfg Config, outages []time.Duration, progress io.Writer) ([]SweepRow, error) {
	if cfg.RecoveryCheck == 0 {
		cfg.RecoveryCheck = DefaultSweepCheck
	}
	cfg.sweep = true
	var out []SweepRow
	for _, d := range outages {
		c := cfg
		c.Outage = d
		rep, err := Replay(ctx, c)
		if err == nil {
			err = rep.savingsErr()
		}
		if err != nil {
			return nil, fmt.Errorf("outage %s: %w", d, err)
		}
		row := SweepRow{Outage: d}
		for _, r := range rep.Rows {
			switch {
			case r.Recovery == nil:
			case r.Arm == ArmFleetRemove:
				row.Without = *r.Recovery
			case r.Arm == ArmFleetRemoveCheck:
				row.With = *r.Recovery
			}
		}
		for _, w := range rep.Warnings {
			if progress != nil {
				fmt.Fprintf(progress, "outage %s: WARNING: %s\n", d, w)
			}
		}
		if progress != nil {
			fmt.Fprintf(progress, "outage %s replayed in %s\n", d, rep.Elapsed.Round(100*time.Millisecond))
		}
		out = append(out, row)
	}
	return out, nil
}

// PrintSweep writes the sweep as a Markdown table (docs/outage-replay.md's), then
// whether the targets were met at every length.
func PrintSweep(w io.Writer, cfg Config, rows []SweepRow) error {
	check := cfg.RecoveryCheck
	if check == 0 {
		check = DefaultSweepCheck
	}
	var b strings.Builder
	fmt.Fprintf(&b, "arm 4 (breakerd fleet-wide, tool removed + notice) without and with a recovery check every %s; %d runs over each outage, then runs arriving at the same rate until the breaker closed\n\n", check, cfg.Runs)
	b.WriteString("| outage | without check: first successful probe after recovery | runs told the tool was down though it worked | with check: half-open after recovery (daemon) | first successful probe after recovery | runs told the tool was down though it worked | status requests (most in any minute) |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	halfOK, probeOK, rateOK := true, true, true
	for _, r := range rows {
		half := "never"
		if r.With.HalfOpened {
			half = r.With.HalfOpenAfter.Round(time.Second).String()
			if r.With.ByCheck {
				half += " (check)"
			} else {
				half += " (cooldown)"
			}
			halfOK = halfOK && r.With.HalfOpenAfter <= HalfOpenTarget
		} else {
			halfOK = false
		}
		probeOK = probeOK && r.With.Closed && r.With.After <= ProbeTarget
		rateOK = rateOK && r.With.MaxPerMinute <= MaxChecksPerMinute
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %d | %d (%d) |\n", r.Outage, probeAfter(r.Without), r.Without.TailLacked,
			half, probeAfter(r.With), r.With.TailLacked, r.With.CheckRequests, r.With.MaxPerMinute)
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Fprintf(&b, "\ntargets at every length: half-open within %s of recovery: %s; first successful probe within %s: %s; at most %d status requests in any minute: %s\n",
		HalfOpenTarget, verdict(halfOK), ProbeTarget, verdict(probeOK), MaxChecksPerMinute, verdict(rateOK))
	_, err := io.WriteString(w, b.String())
	return err
}

func probeAfter(r Recovery) string {
	if !r.Closed {
		return "not within the tail"
	}
	return r.After.Round(time.Second).String()
}
