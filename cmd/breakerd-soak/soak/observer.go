package soak

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/store"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Observer holds what the soak's workers were told and what the observer
// read from Redis, and judges it. It reads no Redis and no clock itself:
// the soak feeds it (so that a test can feed it a bad history). Every
// time is wall-clock time; the soak's Redis and daemons run on the same
// machine, so Redis TIME (events' at_ms) and the workers' clock agree.
//
// The rules, each sound (a violation is certain, not a guess from timing):
//
//   - one probe holder: a probe granted to worker B is a violation when
//     B's whole request [sent, answered] lies inside a span where another
//     grant A certainly held the lease: after A's answer arrived and before
//     both A's Record was sent and A's lease (granted no earlier than A's
//     request was sent) ran out.
//   - the log: per breaker, each transition's generation is the previous
//     one's plus one and its from is the previous one's to; the only other
//     allowed step is a restart at generation 1 from closed, once the
//     breaker's retention has passed since the previous transition (its
//     keys expired and it began again at generation 0). An entry read
//     before that is gone from the log (the stream rolled back) is a
//     violation unless a failover lost it.
//   - every transition once: each (generation, state) a worker was
//     answered with (not degraded, generation > 0) is found in the log as
//     a transition to that state at that generation within LogGrace.
//   - half-open within its lease: an Allow denied with "probe in flight"
//     whose request was sent more than a lease after the last answer that
//     granted that breaker a probe (so every lease had certainly lapsed),
//     checked once every grant that could precede it has been reported
//     (and not judged when an Allow that got no answer, which may have
//     been granted a probe, was sent within a lease and 5 s before it).
//   - no count applied twice: a trip from closed read from the log at
//     time A needs Threshold timeout Records that could have been applied
//     in its run: sent by A and answered (or failed) after the previous
//     transition to closed (a trip whose run's start was not read, such
//     as a breaker's first, is not judged). Judged 5 s after A, when every
//     Record sent by then has been reported.
//   - no OPEN breaker answering CLOSED inside its cooldown without a
//     logged loss: once a worker was answered OPEN with a cooldown ending
//     at D, an answer CLOSED to a request sent before D is a loss of
//     state; it is a violation unless a daemon logged that breaker's loss
//     (daemon.LogStateLost) near it (JudgeForgotten) or the master's kill
//     lost it.
//   - no flapping: see CheckFlaps.
//   - breakers on live masters answer from Redis: see JudgeLive.
//   - no loss logged while Redis kept the state: see JudgeLosses.
//   - flat daemons: see CheckFlat.
//   - the stall rules (forced open, in time, one flip): see stall.go.
//   - no keys past retention: see KeysLeft.
//
// Answers marked degraded (the daemon answered from memory while Redis
// was away) are counted and left out of every rule: their state is the
// daemon's own and is dropped when Redis answers again.
type Observer struct {
	// Lease is the policy's probe timeout.
	Lease time.Duration
	// Retention is the policy's retention (cooldown cap + probe timeout).
	Retention time.Duration
	// LogGrace is how long after a worker was answered its transition
	// may take to be read from the log. Default 30s.
	LogGrace time.Duration

	mu         sync.Mutex
	breakers   map[string]*tracked
	violations []Violation
	counts     Counts
	// failover window: acknowledgements before killedAt that are missing
	// afterwards were lost by the killed master (killedNode), not a
	// violation.
	killedAt, settledAt time.Time
	killedNode          string
	// wipedAt: the master (wipedNode) restarted without persistence then;
	// everything its breakers wrote before is gone.
	wipedAt   time.Time
	wipedNode string
	// masters maps each breaker to the master holding it at the start (nil:
	// a single node, ""); faults counts the faults injected per node,
	// faultedAt holds the first one's time and faultTimes every one's.
	masters    map[string]string
	faults     map[string]int
	faultedAt  map[string]time.Time
	faultTimes map[string][]time.Time
	// live are the degraded answers on masters with no fault injected,
	// for JudgeLive.
	live []liveAnswer
	// forced are the breakers forced open, stalls the stall faults
	// (stall.go), lateCalls the calls within them that failed past their
	// caller's deadline, for JudgeLate.
	forced    map[string]bool
	stalls    []stall
	lateCalls []lateCall
	// Threshold is the policy's threshold (the count-twice rule).
	Threshold int
	forgotten []forgot
}

// forgot is an answer CLOSED inside a cooldown a worker had been told.
type forgot struct {
	breaker                 string
	openSeen, until, closed time.Time
	gen                     int64
}

// Counts are the observer's tallies, for the report.
type Counts struct {
	Allows, Records, Grants, Denials, Degraded int64
	// Unjudged counts probe-in-flight denials not judged: an Allow that
	// got no answer (it may have been granted a probe) was sent near them.
	Unjudged           int64
	Observed, Verified int64 // worker-seen transitions, and those found in the log
	Events             int64 // transitions read from the log
	Restarts           int64 // generation 1 again after retention
	// Lost* are what the killed master lost: transitions read from its
	// log before the kill and gone after it (LostEntries, on LostBreakers
	// breakers), those of them a worker had been answered with
	// (LostObserved, plus worker-answered transitions never found in the
	// log), and probe leases granted again because the grant was lost.
	LostObserved, LostEntries, LostBreakers, LostLeases int64
	// Expired counts cold breakers checked past their retention and found
	// holding no key.
	Expired int64
	// StateExpired counts cold breakers checked past twice their
	// retention and found holding no state key (their event stream may
	// still be within the event retention).
	StateExpired int64
	// Trips counts trips from closed judged by the count-twice rule.
	Trips int64
	// Wiped counts transitions and worker-seen states lost to the restart
	// without persistence; Forgotten the answers CLOSED inside a cooldown
	// (ForgottenLogged: with a loss logged; ForgottenFailover: lost with
	// the killed master).
	Wiped, Forgotten, ForgottenLogged, ForgottenFailover int64
	// LiveAnswers counts the answers for breakers whose master (at the
	// start) had no fault injected when they arrived, LiveDegraded those
	// of them answered from a daemon's memory (violations, but for
	// LiveExcused of them: the pulse saw the host or that node late just
	// before); counted only on a Cluster (SetMasters).
	LiveAnswers, LiveDegraded, LiveExcused int64
	// FlipsExcused counts the flips to memory past the flapping rule's
	// limit that it left out: the pulse saw the host or that node late
	// just before.
	FlipsExcused int64
	// Losses counts the losses the daemons logged (daemon.LogStateLost),
	// FalseLosses those of them for a breaker whose master had no fault
	// injected by then (violations).
	Losses, FalseLosses int64
	// The stall rules (stall.go): answers within a stall on their node
	// (StallAnswers, StallDegraded of them from memory), flips to memory
	// within stalls (StallFlips; StallFlipsExcused: flips after a stall
	// ended that a fresh lateness explains; StallInMemory: daemons that
	// had the node in memory already when its stall began;
	// StallNoFlipExcused: daemons that did not flip while the host ran
	// late), calls failed past the caller's deadline (Late, LateStall of
	// them within a stall: violations, but for LateExcused of them: the
	// host ran late),
	// answers at the breakers forced open (ForcedAnswers, ForcedDegraded
	// from memory, ForcedLet let through: violations, ForcedWiped let
	// through after the restart without persistence wiped the pin).
	StallAnswers, StallDegraded, StallFlips, StallFlipsExcused int64
	StallInMemory, StallNoFlipExcused                          int64
	Late, LateStall, LateExcused                               int64
	ForcedAnswers, ForcedDegraded, ForcedLet, ForcedWiped      int64
}

// Violation is one broken rule.
type Violation struct {
	Rule    string // "two-holders", "log-order", "log-missing", "half-open", "flat", "keys"
	Breaker string
	Detail  string
}

func (v Violation) String() string {
	if v.Breaker == "" {
		return v.Rule + ": " + v.Detail
	}
	return v.Rule + " " + v.Breaker + ": " + v.Detail
}

type grant struct {
	worker              string
	sent, got, recordAt time.Time // recordAt zero: not recorded (yet)
	ticket              string
}

type seen struct {
	gen   int64
	state pb.State
	at    time.Time
}

type logEntry struct {
	id   string
	gen  int64
	to   pb.State
	at   time.Time
	told bool // a worker was answered with this transition
}

type denial struct{ sent, got time.Time }

// failRec is one timeout Record: when it was sent and answered (got zero:
// it failed, and may have been applied).
type failRec struct{ sent, got time.Time }

// trip is a trip from closed read from the log at at, in a run that
// began at since (the previous transition to closed).
type trip struct {
	at, since time.Time
	gen       int64
}

type tracked struct {
	failed  []time.Time // when Allows that got no answer were sent
	grants  []*grant
	denials []denial
	pending []seen     // worker-seen transitions not yet found in the log
	recent  []logEntry // the last transitions read, newest last
	last    *logEntry  // the last transition read (the chain's end)
	cursor  string     // the last stream id read
	fails   []failRec
	trips   []trip
	// openUntil is the cooldown's end a worker was last answered OPEN
	// with (at generation openGen, answered at openSeen).
	openUntil, openSeen time.Time
	openGen             int64
}

// NewObserver returns an observer for a policy's probe lease and retention.
func NewObserver(lease, retention time.Duration) *Observer {
	return &Observer{Lease: lease, Retention: retention, LogGrace: 30 * time.Second, Threshold: Threshold, breakers: map[string]*tracked{}}
}

func (o *Observer) get(b string) *tracked {
	t := o.breakers[b]
	if t == nil {
		t = &tracked{}
		o.breakers[b] = t
	}
	return t
}

func (o *Observer) flag(rule, b, format string, args ...any) {
	o.violations = append(o.violations, Violation{Rule: rule, Breaker: b, Detail: fmt.Sprintf(format, args...)})
}

// excuseOrFlag counts in excused each of held that excuse accepts and
// hands the rest to flag: the judging of what the run held back until
// the pulse's lateness was known (o.mu held).
func excuseOrFlag[T any](held []T, excuse func(T) bool, excused *int64, flag func(T)) {
	for _, x := range held {
		if excuse(x) {
			*excused++
			continue
		}
		flag(x)
	}
}

// inFailover reports whether t falls between the kill and the moment the
// cluster was seen settled again.
func (o *Observer) inFailover(b string, t time.Time) bool {
	k := o.killed(b)
	return !k.IsZero() && !t.Before(k.Add(-time.Second)) && (o.settledAt.IsZero() || !t.After(o.settledAt))
}

// Killed marks the moment the master was killed (a single node: every
// breaker's); Settled the moment the new master answered and the log was
// resynchronised.
func (o *Observer) Killed(at time.Time) { o.KilledOn("", at) }

// KilledOn marks the moment master node was killed: only the breakers it
// held (SetMasters) can lose what it had not replicated.
func (o *Observer) KilledOn(node string, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.killedAt, o.killedNode = at, node
	o.fault(node, at)
}

// killed returns when b's master was killed (zero: it was not).
func (o *Observer) killed(b string) time.Time {
	if o.masters != nil && o.masters[b] != o.killedNode {
		return time.Time{}
	}
	return o.killedAt
}

// Settled: see Killed.
func (o *Observer) Settled(at time.Time) { o.mu.Lock(); o.settledAt = at; o.mu.Unlock() }

// Allow reports one Allow answer: sent and got are when the request left
// and its answer arrived.
func (o *Observer) Allow(b, worker string, sent, got time.Time, r *pb.AllowResponse) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.counts.Allows++
	o.stallAnswer(b, sent, got, r.GetDegraded())
	if o.answered(b, got, r.GetDegraded()) {
		// From memory: its script may have reached Redis and run there
		// after the daemon stopped waiting (a stall), granting a probe
		// no worker saw, as an Allow that got no answer may have.
		t := o.get(b)
		t.failed = append(t.failed, sent)
		return
	}
	t := o.get(b)
	o.see(b, t, r.GetState(), sent, got)
	switch r.GetDecision() {
	case pb.Decision_DECISION_PROBE:
		o.counts.Grants++
		g := &grant{worker: worker, sent: sent, got: got, ticket: r.GetTicket().GetLeaseToken()}
		for _, a := range t.grants {
			end := a.sent.Add(o.Lease)
			if !a.recordAt.IsZero() && a.recordAt.Before(end) {
				end = a.recordAt
			}
			if sent.After(a.got) && got.Before(end) {
				if k := o.killed(b); !k.IsZero() && a.got.Before(k) && sent.After(k.Add(-time.Second)) ||
					o.lostToWipe(b, a.got) && !sent.Before(o.wiped(b).Add(-time.Second)) {
					o.counts.LostLeases++ // a's grant died with the killed master
					continue
				}
				o.flag("two-holders", b, "%s was granted a probe (request %s..%s) while %s held the lease it was granted at %s (lease %s, not recorded before %s)",
					worker, stamp(sent), stamp(got), a.worker, stamp(a.got), o.Lease, stamp(end))
			}
		}
		t.grants = append(t.grants, g)
	case pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT:
		o.counts.Denials++
		t.denials = append(t.denials, denial{sent: sent, got: got})
	}
}

// AllowFailed reports an Allow sent at sent that got no answer (an error):
// it may still have been granted a probe, so denials near it are not
// judged.
func (o *Observer) AllowFailed(b string, sent time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.get(b)
	t.failed = append(t.failed, sent)
}

// Record reports that worker sent the Record settling its probe ticket at
// sentAt, and the answer (nil when it failed).
func (o *Observer) Record(b, worker, ticket string, sentAt, got time.Time, r *pb.RecordResponse) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.counts.Records++
	t := o.get(b)
	if ticket != "" {
		for _, g := range t.grants {
			if g.worker == worker && g.ticket == ticket && g.recordAt.IsZero() {
				g.recordAt = sentAt
			}
		}
	}
	if r != nil {
		o.stallAnswer(b, sentAt, got, r.GetDegraded())
	}
	if r == nil || o.answered(b, got, r.GetDegraded()) {
		return
	}
	o.see(b, t, r.GetState(), sentAt, got)
}

func (o *Observer) see(b string, t *tracked, st *pb.BreakerState, sent, at time.Time) {
	o.cooldown(b, t, st, sent, at)
	if st.GetGeneration() == 0 {
		return
	}
	for _, p := range t.pending {
		if p.gen == st.GetGeneration() && p.state == st.GetState() {
			return
		}
	}
	for _, e := range t.recent {
		if e.gen == st.GetGeneration() && e.to == st.GetState() {
			return
		}
	}
	o.counts.Observed++
	t.pending = append(t.pending, seen{gen: st.GetGeneration(), state: st.GetState(), at: at})
}

// cooldown applies the forgot-open rule to an answer st to a request sent
// at sent that arrived at at.
func (o *Observer) cooldown(b string, t *tracked, st *pb.BreakerState, sent, at time.Time) {
	switch st.GetState() {
	case pb.State_STATE_OPEN:
		if u := time.UnixMilli(st.GetDenyUntilMs()); st.GetDenyUntilMs() > 0 && u.After(t.openUntil) {
			t.openUntil, t.openSeen, t.openGen = u, at, st.GetGeneration()
		}
	case pb.State_STATE_CLOSED:
		// Judged only for a request sent after the OPEN answer arrived and
		// answered, with the clock's slack, before the cooldown's end.
		if !t.openUntil.IsZero() && sent.After(t.openSeen) && at.Before(t.openUntil.Add(-100*time.Millisecond)) {
			o.counts.Forgotten++
			o.forgotten = append(o.forgotten, forgot{breaker: b, openSeen: t.openSeen, until: t.openUntil, closed: at, gen: t.openGen})
			t.openUntil = time.Time{}
		}
	}
}

// Failure reports a timeout Record on b sent at sent and answered at got
// (zero: it failed).
func (o *Observer) Failure(b string, sent, got time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.get(b)
	t.fails = append(t.fails, failRec{sent: sent, got: got})
}

// Wiped marks the moment the master was restarted without persistence
// (a single node: every breaker's).
func (o *Observer) Wiped(at time.Time) { o.WipedOn("", at) }

// WipedOn marks the moment master node was restarted without persistence:
// only the breakers it held (SetMasters) lost their keys.
func (o *Observer) WipedOn(node string, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.wipedAt, o.wipedNode = at, node
	o.fault(node, at)
}

// wiped returns when b's master was restarted without persistence (zero:
// it was not).
func (o *Observer) wiped(b string) time.Time {
	if o.masters != nil && o.masters[b] != o.wipedNode {
		return time.Time{}
	}
	return o.wipedAt
}

// lostToWipe reports whether something of b written at t was lost with
// the restart without persistence.
func (o *Observer) lostToWipe(b string, t time.Time) bool {
	w := o.wiped(b)
	return !w.IsZero() && t.Before(w.Add(time.Second))
}

// rememberedAfterWipe reports whether t falls within a retention after
// the wipe: a daemon that knew a breaker open answers it from memory until
// that open period ends (docs/reliability.md, "Redis that forgets"), at
// its generation from before the wipe, whose transition was in the wiped
// log.
func (o *Observer) rememberedAfterWipe(b string, t time.Time) bool {
	w := o.wiped(b)
	return !w.IsZero() && !t.Before(w) && t.Before(w.Add(o.Retention))
}

// JudgeForgotten flags the answers CLOSED inside a cooldown with no loss
// of their breaker logged (losses: when daemons logged one, by breaker)
// from a second before the cooldown was seen to 10 s after the answer,
// and none lost with the killed master.
func (o *Observer) JudgeForgotten(losses map[string][]time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, f := range o.forgotten {
		logged := false
		for _, l := range losses[f.breaker] {
			logged = logged || (l.After(f.openSeen.Add(-time.Second)) && l.Before(f.closed.Add(10*time.Second)))
		}
		switch {
		case logged:
			o.counts.ForgottenLogged++
		case !o.killed(f.breaker).IsZero() && f.openSeen.Before(o.killed(f.breaker)) && f.closed.After(o.killed(f.breaker).Add(-time.Second)):
			o.counts.ForgottenFailover++
		default:
			o.flag("forgot-open", f.breaker, "answered OPEN at generation %d at %s with a cooldown until %s, then CLOSED at %s; no daemon logged a loss",
				f.gen, stamp(f.openSeen), stamp(f.until), stamp(f.closed))
		}
	}
	o.forgotten = nil
}

// judgeTrips applies the count-twice rule to t's trips read at least 5 s
// before now, and drops timeout Records too old to matter.
func (o *Observer) judgeTrips(b string, t *tracked, now time.Time) {
	kept := t.trips[:0]
	for _, tr := range t.trips {
		if now.Sub(tr.at) < 5*time.Second {
			kept = append(kept, tr)
			continue
		}
		o.counts.Trips++
		n := 0
		for _, f := range t.fails {
			if !f.sent.After(tr.at.Add(50*time.Millisecond)) && (f.got.IsZero() || !f.got.Before(tr.since.Add(-50*time.Millisecond))) {
				n++
			}
		}
		if n < o.Threshold && !o.lostToWipe(b, tr.at) && !o.inFailover(b, tr.at) {
			o.flag("count-twice", b, "generation %d tripped at %s after %d timeout Records that could count in its run (since %s), fewer than the threshold %d",
				tr.gen, stamp(tr.at), n, stamp(tr.since), o.Threshold)
		}
	}
	t.trips = kept
	keptF := t.fails[:0]
	for _, f := range t.fails {
		if now.Sub(f.sent) < 2*time.Minute {
			keptF = append(keptF, f)
		}
	}
	t.fails = keptF
}

// Log feeds the transitions read from breaker b's event stream since the
// last call, oldest first. first is the id the read started from
// (inclusive): the last entry read before, which must still be there
// ("" when nothing was read before); entries holds what the stream
// returned (starting with that entry when it is still there).
func (o *Observer) Log(b, first string, entries []*pb.Event, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.get(b)
	if first != "" && (len(entries) == 0 || entries[0].GetId() != first) {
		// The last entry read is gone: the stream expired (idle past the
		// event retention), or it rolled back.
		o.rolledBack(b, t, now)
	} else if first != "" {
		entries = entries[1:]
	}
	for _, e := range entries {
		t.cursor = e.GetId()
		if e.GetKind() != pb.EventKind_EVENT_KIND_TRANSITION && e.GetKind() != pb.EventKind_EVENT_KIND_FORCED {
			continue
		}
		o.counts.Events++
		cur := logEntry{id: e.GetId(), gen: e.GetGeneration(), to: e.GetTo(), at: time.UnixMilli(e.GetAtMs())}
		if e.GetKind() == pb.EventKind_EVENT_KIND_TRANSITION && e.GetFrom() == pb.State_STATE_CLOSED && cur.to == pb.State_STATE_OPEN {
			if p := t.last; p != nil && p.to == pb.State_STATE_CLOSED {
				t.trips = append(t.trips, trip{at: cur.at, since: p.at, gen: cur.gen})
			}
		}
		if p := t.last; p != nil {
			switch {
			case cur.gen == p.gen+1 && e.GetFrom() == p.to:
			case cur.gen == 1 && e.GetFrom() == pb.State_STATE_CLOSED && !cur.at.Before(p.at.Add(o.Retention)):
				o.counts.Restarts++
			case o.inFailover(b, cur.at) && cur.gen <= p.gen:
				// The new master began again from what it had replicated.
				o.counts.LostEntries += p.gen - cur.gen + 1
			default:
				o.flag("log-order", b, "entry %s: generation %d %s->%s follows generation %d (to %s, at %s)",
					cur.id, cur.gen, breaker.EnumName(e.GetFrom()), breaker.EnumName(cur.to), p.gen, breaker.EnumName(p.to), stamp(p.at))
			}
		}
		t.last = &cur
		t.recent = append(t.recent, cur)
		if len(t.recent) > 64 {
			t.recent = t.recent[len(t.recent)-64:]
		}
		kept := t.pending[:0]
		for _, s := range t.pending {
			if s.gen == cur.gen && s.state == cur.to {
				o.counts.Verified++
				t.recent[len(t.recent)-1].told = true
				continue
			}
			kept = append(kept, s)
		}
		t.pending = kept
	}
}

// Resync is called once the new master answers after the kill, with the
// newest entry of b's stream at or before the last id read (nil when
// there is none): every transition read after it was lost with the killed
// master, unless the whole stream is gone and had been idle past the
// event retention (it expired). It counts them (LostEntries; LostObserved for those a worker
// had been answered with) and continues b's chain from the survivor.
func (o *Observer) Resync(b string, survivor *pb.Event, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.get(b)
	if t.cursor == "" || (survivor != nil && survivor.GetId() == t.cursor) {
		return
	}
	if survivor == nil && (t.last == nil || now.Sub(t.last.at) >= time.Minute) {
		// The whole stream is gone, and its last transition is older than
		// the event retention (1m, the soak's): it expired, nothing lost.
		t.last, t.cursor, t.recent = nil, "", nil
		return
	}
	keep := 0
	for i, e := range t.recent {
		switch {
		case survivor != nil && store.CompareIDs(e.id, survivor.GetId()) <= 0:
			keep = i + 1
		case o.lostToWipe(b, e.at): // the restart without persistence lost it
			o.counts.Wiped++
		default:
			o.counts.LostEntries++
			if e.told {
				o.counts.LostObserved++
			}
		}
	}
	if o.wiped(b).IsZero() {
		o.counts.LostBreakers++
	}
	t.recent = t.recent[:keep]
	t.last = nil
	if keep > 0 {
		last := t.recent[keep-1]
		t.last = &last
	}
	t.cursor = ""
	if survivor != nil {
		t.cursor = survivor.GetId()
	}
}

// rolledBack handles a stream whose last read entry is gone.
func (o *Observer) rolledBack(b string, t *tracked, now time.Time) {
	if t.last == nil {
		t.cursor = ""
		return
	}
	switch {
	case o.lostToWipe(b, t.last.at):
		o.counts.Wiped++
	case o.inFailover(b, now) || (!o.killed(b).IsZero() && t.last.at.Before(o.killed(b)) && !t.last.at.Before(o.killed(b).Add(-10*time.Second))):
		o.counts.LostEntries++
	case now.Sub(t.last.at) >= time.Minute: // idle past the (minimum) event retention: expired
	default:
		o.flag("log-order", b, "entry %s (generation %d, to %s, at %s) is gone from the log", t.last.id, t.last.gen, breaker.EnumName(t.last.to), stamp(t.last.at))
	}
	t.last, t.cursor, t.recent = nil, "", nil
}

// Cursor returns the stream id to read b's log from next ("" for all).
func (o *Observer) Cursor(b string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.get(b).cursor
}

// Sweep judges what has become judgeable by now: worker-seen transitions
// older than LogGrace still missing from the log, and probe-in-flight
// denials whose every possible lease has been reported. It drops history
// older than it needs.
func (o *Observer) Sweep(now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	names := make([]string, 0, len(o.breakers))
	for b := range o.breakers {
		names = append(names, b)
	}
	sort.Strings(names)
	for _, b := range names {
		t := o.breakers[b]
		o.judgeTrips(b, t, now)
		kept := t.pending[:0]
		for _, s := range t.pending {
			switch {
			case now.Sub(s.at) < o.LogGrace:
				kept = append(kept, s)
			case o.lostToWipe(b, s.at) || o.rememberedAfterWipe(b, s.at):
				o.counts.Wiped++
			case !o.killed(b).IsZero() && s.at.Before(o.killed(b)) || o.inFailover(b, s.at):
				o.counts.LostObserved++
			default:
				o.flag("log-missing", b, "a worker was answered %s at generation %d at %s; the log has no such transition %s later",
					breaker.EnumName(s.state), s.gen, stamp(s.at), o.LogGrace)
			}
		}
		t.pending = kept
		// A denial is judged once a lease has passed since its answer:
		// every grant that could precede it has been reported by then.
		keptD := t.denials[:0]
		for _, d := range t.denials {
			if now.Sub(d.got) < o.Lease+5*time.Second {
				keptD = append(keptD, d)
				continue
			}
			unknown := false
			for _, f := range t.failed {
				unknown = unknown || (!f.After(d.got) && f.After(d.sent.Add(-o.Lease-5*time.Second)))
			}
			if unknown {
				o.counts.Unjudged++
				continue
			}
			var last time.Time
			for _, g := range t.grants {
				if !g.sent.After(d.got) && g.got.After(last) {
					last = g.got
				}
			}
			if d.sent.After(last.Add(o.Lease)) && !o.inFailover(b, d.sent) {
				if last.IsZero() {
					o.flag("half-open", b, "Allow sent at %s was denied with a probe in flight, but no probe was granted (answered) before", stamp(d.sent))
				} else {
					o.flag("half-open", b, "Allow sent at %s was denied with a probe in flight, but the last probe was granted by %s: its %s lease had lapsed",
						stamp(d.sent), stamp(last), o.Lease)
				}
			}
		}
		t.denials = keptD
		keptG := t.grants[:0]
		for _, g := range t.grants {
			if now.Sub(g.got) < 2*o.Lease+10*time.Second {
				keptG = append(keptG, g)
			}
		}
		t.grants = keptG
		keptF := t.failed[:0]
		for _, f := range t.failed {
			if now.Sub(f) < 2*o.Lease+20*time.Second {
				keptF = append(keptF, f)
			}
		}
		t.failed = keptF
	}
}

// Sample is one reading of a daemon's process.
type Sample struct {
	At         time.Time
	LiveHeap   float64 // go_gc_heap_live_bytes: the heap the last collection found live
	Goroutines float64 // go_goroutines
}

// FlatRule is the rule CheckFlat applies, in words for the report.
const FlatRule = "after a warm-up of the first 20% of the run, the samples are split in two halves; the later half's peak live heap (what the last collection kept) must stay within 1.25x the earlier half's peak plus 8 MiB, and its peak goroutine count within the earlier peak plus 50 plus the RPCs that can be in flight at once (one per worker: a goroutine each while it is served)"

// CheckFlat applies FlatRule to one daemon's samples (in time order).
// inFlight is how many RPCs can be in flight at once (the workers, one
// call each): goroutines rise and fall with them, by load, not by leak
// (a loaded machine saw 353 then 421 with 200 workers). It needs at least
// 4 samples after the warm-up; fewer is not judged, but none at all while
// a scrape failed (lastErr) is flagged: the daemon's metrics lack what the
// rule reads.
func (o *Observer) CheckFlat(daemon string, samples []Sample, inFlight int, lastErr error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(samples) == 0 && lastErr != nil {
		o.flag("flat", daemon, "no sample of its live heap and goroutines: %v", lastErr)
		return
	}
	s := samples[len(samples)/5:]
	if len(s) < 4 {
		return
	}
	a, b := s[:len(s)/2], s[len(s)/2:]
	peak := func(ss []Sample) (h, g float64) {
		for _, x := range ss {
			h, g = max(h, x.LiveHeap), max(g, x.Goroutines)
		}
		return h, g
	}
	ha, ga := peak(a)
	hb, gb := peak(b)
	if hb > 1.25*ha+8<<20 {
		o.flag("flat", daemon, "live heap grew: peak %.1f MiB in the later half, %.1f MiB in the earlier", hb/(1<<20), ha/(1<<20))
	}
	if gb > ga+50+float64(inFlight) {
		o.flag("flat", daemon, "goroutines grew: peak %.0f in the later half, %.0f in the earlier (allowance 50 + %d in flight)", gb, ga, inFlight)
	}
}

// KeysLeft reports a breaker's keys still present (none: all gone) and
// flags those that should have expired: the breaker was last called at
// lastCall, and its state keys live at most KeyLife after the last write,
// its event stream the event retention after its last event (no later
// than its last call).
func (o *Observer) KeysLeft(b string, keys []string, lastCall, now time.Time, eventRetention time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var bad []string
	for _, k := range keys {
		limit := lastCall.Add(KeyLife + 2*time.Second)
		if strings.HasSuffix(k, ":events") {
			limit = lastCall.Add(eventRetention + 2*time.Second)
		}
		if now.After(limit) {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 && now.After(lastCall.Add(eventRetention+2*time.Second)) {
		o.counts.Expired++
	}
	if now.After(lastCall.Add(KeyLife + 2*time.Second)) {
		stateLeft := false
		for _, k := range keys {
			stateLeft = stateLeft || !strings.HasSuffix(k, ":events")
		}
		if !stateLeft {
			o.counts.StateExpired++
		}
	}
	if len(bad) > 0 {
		o.flag("keys", b, "last called at %s, still holds %s at %s", stamp(lastCall), strings.Join(bad, ", "), stamp(now))
	}
}

// Flag records a violation found outside the observer's own rules (the
// soak's key scan).
func (o *Observer) Flag(rule, b, format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.flag(rule, b, format, args...)
}

// Violations returns every violation so far, in the order found.
func (o *Observer) Violations() []Violation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Violation(nil), o.violations...)
}

// Counts returns the tallies so far.
func (o *Observer) Counts() Counts {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000") }
