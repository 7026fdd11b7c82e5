package soak

import (
	"fmt"
	"syscall"
	"time"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The stall rules: a Redis node that stops answering while its
// connections stay open (Config.StallAt; Config.StallFault: a SIGSTOPped
// process, a blackholed link, replies later than the decision bound)
// must be judged by each daemon's decision bound, not by its callers'
// deadlines.
// They count, never time:
//
//   - forced open: no call at a breaker forced open (SetForced) is let
//     through, from Redis or from a daemon's memory ("forced-open"),
//     unless the restart without persistence wiped its pin.
//   - in time: no call overlapping a stall on its breaker's node fails
//     past the caller's deadline ("late": DeadlineExceeded).
//   - one flip: each daemon that ran through a stall sends the stalled
//     node to memory exactly once within it, or had it there already
//     when it began ("stall-flips"): never is a stall its callers waited
//     out, twice is flapping. A flip once the stall is over, while the
//     pulse saw the host or the node late afresh, is that lateness's.
//   - degraded answers only on the stalled node: the stall is a fault on
//     its node for the rule in answered.

// StallSettle is how long after a stall ends its node's answers and
// flips still belong to it: the daemons ask a node back after 3 answers
// 200 ms apart, well within it.
const StallSettle = 5 * time.Second

// stall is one stall fault: node stopped answering from from to to;
// what says how, for the report.
type stall struct {
	node, what string
	from, to   time.Time
}

// SetForced tells the observer which breakers were forced open before the
// workers started.
func (o *Observer) SetForced(names []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.forced = map[string]bool{}
	for _, b := range names {
		o.forced[b] = true
	}
}

// StallBegins marks that node ("" for Sentinel's master) stops answering
// at at: a fault on it from then on, so that the answers during the stall
// are judged as answers of a faulted node when they arrive. what names
// the fault in the report ("SIGSTOP of 127.0.0.1:7001").
func (o *Observer) StallBegins(node, what string, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stalls = append(o.stalls, stall{node: node, what: what, from: at})
	o.fault(node, at)
}

// StallEnds marks that node's stall (StallBegins) ended at at.
func (o *Observer) StallEnds(node string, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range o.stalls {
		if o.stalls[i].node == node && o.stalls[i].to.IsZero() {
			o.stalls[i].to = at
		}
	}
}

// inStall returns the stall on b's node that [sent, got] of a call at b
// overlaps (or its settling; a stall not yet ended, all of it), nil when
// none.
func (o *Observer) inStall(b string, sent, got time.Time) *stall {
	for i, s := range o.stalls {
		if o.masters[b] == s.node && !got.Before(s.from) && (s.to.IsZero() || !sent.After(s.to.Add(StallSettle))) {
			return &o.stalls[i]
		}
	}
	return nil
}

// AllowForced reports an Allow answer at a breaker forced open, to who
// (a worker and its daemon, for the report).
func (o *Observer) AllowForced(b, who string, sent, got time.Time, r *pb.AllowResponse) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.counts.Allows++
	o.counts.ForcedAnswers++
	degraded := o.answered(b, got, r.GetDegraded())
	if degraded {
		o.counts.ForcedDegraded++
	}
	o.stallAnswer(b, sent, got, degraded)
	d := r.GetDecision()
	if d != pb.Decision_DECISION_ALLOWED && d != pb.Decision_DECISION_PROBE {
		return
	}
	if w := o.wiped(b); !w.IsZero() && !sent.Before(w.Add(-time.Second)) {
		o.counts.ForcedWiped++ // the restart without persistence lost its pin
		return
	}
	o.counts.ForcedLet++
	o.flag("forced-open", b, "forced open, yet let through (%s, degraded %t) to %s, request sent at %s", d, degraded, who, stamp(sent))
}

// Late reports a call (call: "Allow", "Record") at b by who (a worker
// and its daemon) sent at sent that failed with the caller's deadline
// (CallDeadline) passed at got: a violation (JudgeLate) when it overlaps
// a stall on b's node, where the daemons' bound must answer first.
func (o *Observer) Late(b, call, who string, sent, got time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.counts.Late++
	s := o.inStall(b, sent, got)
	if s == nil {
		return
	}
	o.counts.LateStall++
	o.lateCalls = append(o.lateCalls, lateCall{b: b, call: call, who: who, sent: sent, got: got, stall: *s})
}

// lateCall is a call within a stall that failed past its caller's
// deadline (Late).
type lateCall struct {
	b, call, who string
	sent, got    time.Time
	stall        stall
}

// JudgeLate flags each call within a stall that failed past its caller's
// deadline ("late"), naming the call, the caller, the fault and how late
// the failure came; unless the host ran late during the call (late; see
// hostRanLate), when no daemon's bound could have answered in time: those
// are counted apart (LateExcused).
func (o *Observer) JudgeLate(late Late) {
	o.mu.Lock()
	defer o.mu.Unlock()
	excuseOrFlag(o.lateCalls, func(c lateCall) bool { return late.hostRanLate(c.sent, c.got) }, &o.counts.LateExcused, func(c lateCall) {
		o.flag("late", c.b, "%s by %s, sent at %s during the stall (%s, from %s), failed at %s: %s past the caller's %s deadline",
			c.call, c.who, stamp(c.sent), c.stall.what, stamp(c.stall.from), stamp(c.got),
			c.got.Sub(c.sent.Add(CallDeadline)).Round(time.Millisecond), CallDeadline)
	})
	o.lateCalls = nil
}

// stallAnswer counts an answer at b within a stall on its node (o.mu held).
func (o *Observer) stallAnswer(b string, sent, got time.Time, degraded bool) {
	if o.inStall(b, sent, got) == nil {
		return
	}
	o.counts.StallAnswers++
	if degraded {
		o.counts.StallDegraded++
	}
}

// CheckStallFlips flags each daemon log (logs: the daemons that ran
// through every stall) that did not send a stalled node to memory exactly
// once within the stall and its settling, up to the next fault on that
// node (flips and backs: when, per daemon log and node, it went to memory
// and answered again). A daemon that still had the node in memory when
// the stall began (a flip before it, on a host the pulse saw late, is
// judged by CheckFlaps) has made that flip already. A daemon that never
// flipped while the host ran late within the stall or its decisions'
// bound after it (late; see hostRanLate) took its decisions' silence for
// its own lateness, as it must: counted apart (StallNoFlipExcused). A
// flip after the stall's end that the pulse saw the host or the node late
// just before, in a late span that began after the stall ended (a
// starved host, not the stall's replies), is counted apart too
// (StallFlipsExcused), not as the stall's.
func (o *Observer) CheckStallFlips(logs []string, flips, backs map[FlipKey][]time.Time, late Late) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.stalls {
		end := s.to.Add(StallSettle)
		for _, f := range o.faultTimes[s.node] {
			if f.After(s.from) && f.Before(end) {
				end = f
			}
		}
		for _, l := range logs {
			k := FlipKey{Log: l, Node: s.node}
			n := 0
			for _, t := range flips[k] {
				switch {
				case t.Before(s.from) || !t.Before(end):
				case t.After(s.to) && late.excusesSince(s.node, t, s.to):
					o.counts.StallFlipsExcused++
				default:
					n++
				}
			}
			o.counts.StallFlips += int64(n)
			already := latest(flips[k], s.from).After(latest(backs[k], s.from))
			if already {
				o.counts.StallInMemory++
				n++
			}
			switch {
			case n == 0 && late.hostRanLate(s.from, s.to.Add(DecisionTimeout)):
				o.counts.StallNoFlipExcused++
			case n != 1:
				o.flag("stall-flips", "", "%s: node %q went to memory %d times during its stall %s..%s (in memory when it began: %t; want exactly once)",
					l, s.node, n, stamp(s.from), stamp(s.to), already)
			}
		}
	}
}

// latest returns the last of times before t (zero if none).
func latest(times []time.Time, t time.Time) time.Time {
	var last time.Time
	for _, x := range times {
		if x.Before(t) && x.After(last) {
			last = x
		}
	}
	return last
}

// FormatStalls renders the stall figures for the report.
func (o *Observer) FormatStalls() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.counts
	return fmt.Sprintf("%d answers within stalls on their node (%d degraded); %d flips to memory within them (%d more after them while the pulse saw the host or node late afresh; and %d daemons with the node in memory already when one began, %d with no flip while the host ran late); %d calls past the caller's deadline within them (%d of those while the host ran late; %d in the whole run); at the breakers forced open: %d answers (%d degraded), %d let through (%d after the restart without persistence wiped the pin)",
		c.StallAnswers, c.StallDegraded, c.StallFlips, c.StallFlipsExcused, c.StallInMemory, c.StallNoFlipExcused, c.LateStall, c.LateExcused, c.Late, c.ForcedAnswers, c.ForcedDegraded, c.ForcedLet, c.ForcedWiped)
}

// How long a stall lasts, and the bounds it is set between. The daemons
// bound each decision by DecisionTimeout (--redis-decision-timeout), a
// second rather than breakerd's 300 ms: the soak runs on loaded CI
// machines, where a Redis with no fault answering a script 300 ms late
// happens, and the daemon (rightly) calls that an outage, which the
// observer could not tell from a daemon's mistake. A stall is a SIGSTOP
// longer than twice that bound, so that each daemon's calls in flight
// fail and send the node to memory within it, and shorter than the time
// after which the topology's replica takes over (SentinelDownAfter,
// ClusterNodeTimeout, which the soak raises for it), so that it stays a
// stall (the same master, the same data, its connections open) and never
// becomes a failover. A replica-less node could stall for as long as
// wanted, but every master of the soak's topologies has a replica (the
// failover needs it), and a node of its own would add processes to every
// run; the stall is the fault of a node whose replica is there and not
// yet needed.
const (
	DecisionTimeout    = time.Second
	Stall              = 2500 * time.Millisecond
	SentinelDownAfter  = 4 * time.Second
	ClusterNodeTimeout = 5 * time.Second
)

// The stall faults (Config.StallFault): the node's process frozen, the
// daemons' link to it blackholed (a proxy that forwards nothing and keeps
// its connections open; Restore then drops them, as a firewall that
// forgot them would), or its replies StallLatency late (the proxy). The
// daemons and the observer reach a proxied node through the proxy for
// the whole run (the topology announces the proxy's address: a Cluster
// master's cluster-announce-port, Sentinel's monitor address), so the
// proxy is in place before the daemons start.
const (
	StallSIGSTOP   = "sigstop"
	StallBlackhole = "blackhole"
	StallLatency   = "latency"
)

// StallFaults lists the stall faults.
var StallFaults = []string{StallSIGSTOP, StallBlackhole, StallLatency}

// StallDelay is the latency fault's delay on every reply: above the
// daemons' DecisionTimeout, below the callers' CallDeadline and half of
// SentinelDownAfter (Sentinel, whose link to the master goes through the
// proxy, must not take the slow master for a dead one).
const StallDelay = 1500 * time.Millisecond

// stallNode is the stalled node's handle: its address as the daemons
// name it, its process (SIGSTOP) or the proxy in front of it.
type stallNode struct {
	fault string
	addr  string
	pid   func() (int, error)
	proxy *proxyProc
}

// proxied reports whether fault needs a proxy in front of the node.
func proxied(fault string) bool { return fault == StallBlackhole || fault == StallLatency }

// what names the fault for the report.
func (n *stallNode) what() string {
	switch n.fault {
	case StallBlackhole:
		return "blackholed link to " + n.addr
	case StallLatency:
		return fmt.Sprintf("replies of %s %v late", n.addr, StallDelay)
	}
	return "SIGSTOP of " + n.addr
}

// on applies the fault; off ends it.
func (n *stallNode) on() error {
	switch n.fault {
	case StallBlackhole:
		return n.proxy.Stall()
	case StallLatency:
		return n.proxy.Delay(StallDelay)
	}
	return n.signal(syscall.SIGSTOP)
}

func (n *stallNode) off() error {
	switch n.fault {
	case StallBlackhole:
		return n.proxy.Restore()
	case StallLatency:
		return n.proxy.Delay(0)
	}
	return n.signal(syscall.SIGCONT)
}

func (n *stallNode) signal(sig syscall.Signal) error {
	pid, err := n.pid()
	if err == nil {
		err = syscall.Kill(pid, sig)
	}
	if err != nil {
		return fmt.Errorf("%v %s: %w", sig, n.addr, err)
	}
	return nil
}

// stallFor applies the fault to n (node: its name for the observer) for
// d, then ends it, marking the stall on the observer, and returns when
// it was.
func stallFor(obs *Observer, node string, n *stallNode, d time.Duration) (from, to time.Time, err error) {
	from = time.Now()
	obs.StallBegins(node, n.what(), from)
	defer func() { obs.StallEnds(node, to) }()
	if err := n.on(); err != nil {
		return from, from, err
	}
	time.Sleep(d)
	to = time.Now()
	return from, to, n.off()
}
