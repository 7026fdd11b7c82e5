package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/breakerd/breakerd/internal/outage"
	"github.com/breakerd/breakerd/internal/replylost"
)

// A Redis that stalls (a link that forwards nothing, a frozen process,
// replies slower than any decision can wait) never refuses anything: its
// commands just do not come back. So each decision script (Allow, Record)
// runs on a budget of the daemon's own, Options.DecisionTimeout, whatever
// the caller's: one still outstanding when it passes counts as Redis
// failing (OutageTimeouts in a row send its node to memory), even when
// its caller has stopped waiting, and no caller waits on it past it.
// Only the decision scripts and the reads a decision waits on (the
// new-breaker quota's Exists, a child's read of its parent) are bound so:
// List, Events, SCAN and savings reads may take longer and keep go-redis's
// read timeout.

// DefaultDecisionTimeout is Options.DecisionTimeout's default: far above
// a decision script's round trip on a loaded host (a few milliseconds),
// and short enough that OutageTimeouts of them in a row end well within
// a second.
const DefaultDecisionTimeout = 300 * time.Millisecond

// LaxDecisionTimeout is Options.DecisionTimeout's zero value: far past
// any decision a loaded host (a -race build, other suites at once) keeps
// waiting, so only a stall reaches it.
const LaxDecisionTimeout = 10 * time.Second

// stalled is the error of a decision script still outstanding at the
// daemon's bound: Redis is failing (IsUnavailable), not the caller's
// deadline. A decision released at its node's outage (decisions.release)
// fails with it too, down set: its node went to memory first. late says
// the daemon itself ran late meanwhile (lateness): Redis may have
// answered in time, unread.
type stalled struct {
	bound time.Duration
	down  bool
	late  bool
}

func (e stalled) Error() string {
	switch {
	case e.down:
		return fmt.Sprintf("redis did not answer before its node was taken as down (decision timeout %s)", e.bound)
	case e.late:
		return fmt.Sprintf("no answer from redis read within the decision timeout (%s): %s (a starved host, or a stopped process)", e.bound, LateWords)
	}
	return fmt.Sprintf("redis did not answer within the decision timeout (%s)", e.bound)
}

// LateWords are in the text of every error RanLate names: a caller that
// has only that text (a gRPC status's message) tells such an error by them.
const LateWords = "this daemon ran late"

// RanLate reports whether err is a decision's that passed its bound
// unread while this daemon itself ran late (a starved host, a stopped
// process): no news of Redis, so it begins no outage.
func RanLate(err error) bool {
	var s stalled
	return errors.As(err, &s) && s.late
}

// decisionBegunKey is the context key DecisionBegun sets.
type decisionBegunKey struct{}

// DecisionBegun returns ctx marked as a call whose decision began at t,
// before the store was asked for it: the reads the call waits on first
// (the new-breaker quota's Exists, a child's read of its parent) and its
// decision scripts then share one Options.DecisionTimeout from t, rather
// than each taking a whole one. A ctx marked already keeps its mark: the
// call's first read began the bound.
func DecisionBegun(ctx context.Context, t time.Time) context.Context {
	if _, ok := ctx.Value(decisionBegunKey{}).(time.Time); ok {
		return ctx
	}
	return context.WithValue(ctx, decisionBegunKey{}, t)
}

// WithinDecision returns ctx bounded as a read a decision waits on: by
// what is left of the decision timeout for ctx's call (DecisionBegun), so
// that a stalled Redis fails the read within the daemon's bound, not at
// the caller's deadline.
func (s *Store) WithinDecision(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.decisionBound(ctx))
}

// decisionBound is what is left of the decision timeout for ctx's call
// (DecisionBegun), and never under a tenth of it: a script always gets a
// chance to be answered.
func (s *Store) decisionBound(ctx context.Context) time.Duration {
	bound := s.o.DecisionTimeout
	if t, ok := ctx.Value(decisionBegunKey{}).(time.Time); ok {
		return max(bound-time.Since(t), bound/10)
	}
	return bound
}

// decide runs the decision script sc for name on its node n, judged by
// the daemon's bound (see above) rather than the caller's ctx: the
// script runs on a context that keeps ctx's values but not its end (the
// decision itself, see decision), and its outcome (an answer, a failure,
// or still nothing at the bound) is judged exactly once for n. A
// coalesced script is sent and awaited on the caller's goroutine
// (decisions.runHere); any other runs on one of the store's kept workers.
// The caller gets the answer, or an error when the bound passes first or
// n's outage begins meanwhile (stalled: the caller is answered from
// memory, not at the bound) or its ctx ends (its error); each is a
// replylost.StillQueued whose Wait returns once the script has ended,
// since it may still run. An answer within the bound costs no goroutine
// start and no timer: the store's watchdog (decisions.watch) ends the
// late ones.
func (s *Store) decide(ctx context.Context, n *outage.Node, name string, sc script, keys []string, args []any) ([]any, error) {
	if err := ctx.Err(); err != nil {
		return nil, replylost.Unsent{Err: err}
	}
	bound := s.decisionBound(ctx)
	d := s.dec.get()
	d.parent, d.bound, d.deadline = context.WithoutCancel(ctx), bound, time.Now().Add(bound)
	d.s, d.n, d.name, d.seq = s, n, name, n.Send()
	d.sc, d.keys, d.args = sc, keys, args
	d.ended.Add(1)
	if p := s.coalescedHere(ctx); p != nil {
		s.dec.runHere(ctx, s, p, d)
	} else {
		s.dec.start(s, d)
	}
	select {
	case <-d.reply:
	case <-ctx.Done():
		return nil, replylost.StillQueued{Err: ctx.Err(), Wait: d.wait}
	}
	switch d.state.Load() {
	case decisionExpired:
		return nil, replylost.StillQueued{Err: d.stall(), Wait: d.wait}
	case decisionReleased:
		return nil, replylost.StillQueued{Err: stalled{bound: bound, down: true}, Wait: d.wait}
	}
	res, err := d.res, d.err
	s.dec.put(d)
	return res, err
}

// The states of a decision: its script outstanding, answered (the
// worker's word, in time), expired (the watchdog's, at the bound), or
// released (its node's outage began first: decisions.release).
const (
	decisionPending int32 = iota
	decisionAnswered
	decisionExpired
	decisionReleased
)

// closedChan is the Done of a decision that expired before it was asked.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// decision is one decision script in flight, and the context it runs on:
// the caller's values (parent, without its end), the daemon's bound as
// its deadline, ended by the watchdog at that deadline (Done closes) or
// by time (Err). Whoever moves it out of pending (the goroutine with the
// answer: its caller, a worker, or one of its own; or the watchdog at the
// bound) judges it for its node and wakes the caller; a decision answered
// in time goes back to the store's pool.
type decision struct {
	parent   context.Context
	deadline time.Time
	bound    time.Duration
	s        *Store
	n        *outage.Node
	name     string
	seq      int64
	sc       script
	keys     []string
	args     []any

	state  atomic.Int32
	reply  chan struct{} // one word for the caller (capacity 1)
	ended  sync.WaitGroup
	res    []any
	err    error
	queued func() // a coalesced script left queued at the bound

	mu      sync.Mutex
	done    chan struct{} // made when asked for; closed at expiry
	expired atomic.Bool
	stop    chan struct{} // ends a wait on the caller's goroutine (waiting)
	stopped bool          // stop is closed
	stopFn  func()        // d.stopWaiting, made once
	stray   bool          // a stopFn for the caller's ctx may still run: not for the pool

	prev, next *decision // in the watchdog's list while outstanding
}

func (d *decision) Deadline() (time.Time, bool) { return d.deadline, true }
func (d *decision) Value(key any) any           { return d.parent.Value(key) }

func (d *decision) Done() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done == nil {
		if d.expired.Load() {
			return closedChan
		}
		d.done = make(chan struct{})
	}
	return d.done
}

func (d *decision) Err() error {
	if d.expired.Load() || !time.Now().Before(d.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// sent is when d was sent; askAt when its node is asked (ask) if d is
// still outstanding: half its bound later.
func (d *decision) sent() time.Time  { return d.deadline.Add(-d.bound) }
func (d *decision) askAt() time.Time { return d.deadline.Add(-d.bound / 2) }

// stall is d's error once its bound passed unanswered: late when the
// daemon ran late since d was sent.
func (d *decision) stall() stalled {
	return stalled{bound: d.bound, late: d.s.out.RanLateSince(d.sent())}
}

// wait returns once the decision's script has ended, and a coalesced
// script it left queued has too.
func (d *decision) wait() {
	d.ended.Wait()
	if d.queued != nil {
		d.queued()
	}
}

// run runs d's script on a worker and says how it ended.
func (d *decision) run() {
	d.end(d.s.script(d, d.sc, d.keys, d.args))
}

// end takes the outcome of d's script, and moves d to answered with it
// unless the watchdog moved it first.
func (d *decision) end(res []any, err error) {
	if err != nil && d.Err() != nil {
		// Ended by its deadline (a read deadline, a timer): a goroutine
		// that gets here only well after it ran late, as the watchdog
		// would have.
		d.s.dec.late.check(d.deadline, time.Now())
		var q replylost.StillQueued
		if errors.As(err, &q) {
			d.queued = q.Wait
		}
		err = d.stall()
	}
	d.res, d.err = res, err
	answered := d.state.CompareAndSwap(decisionPending, decisionAnswered)
	d.s.dec.unwatch(d)
	if answered {
		d.s.judge(d.n, d.name, d.seq, d.sent(), err)
	}
	d.ended.Done()
	if answered {
		d.reply <- struct{}{} // d is the caller's (or the garbage's) from here
	}
}

// expire ends d, moved to expired at its bound: it is judged stalled,
// its script's context ends, and its caller is woken.
func (d *decision) expire() {
	d.cancel()
	d.s.judge(d.n, d.name, d.seq, d.sent(), d.stall())
	d.reply <- struct{}{}
}

// release ends d, moved to released at its node's outage: its script's
// context ends and its caller is woken, unjudged (its node is down).
func (d *decision) release() {
	d.cancel()
	d.reply <- struct{}{}
}

// cancel ends d's script's context, and a wait for it on the caller's
// goroutine.
func (d *decision) cancel() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expired.Store(true)
	if d.done != nil {
		close(d.done)
	}
	d.stopWaitingLocked()
}

// stopWaiting ends a wait for d on its caller's goroutine (waiting).
func (d *decision) stopWaiting() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopWaitingLocked()
}

func (d *decision) stopWaitingLocked() {
	if !d.stopped {
		d.stopped = true
		close(d.stop)
	}
}

// waiting is the context a caller waits on for its decision d's reply
// (decisions.runHere): it ends when the caller's own context does or the
// watchdog ends d, whichever is first.
type waiting struct{ d *decision }

// errStopped is a waiting context's error.
var errStopped = errors.New("stopped waiting for the decision")

func (w waiting) Deadline() (time.Time, bool) { return w.d.deadline, true }
func (w waiting) Value(any) any               { return nil }
func (w waiting) Done() <-chan struct{}       { return w.d.stop }

func (w waiting) Err() error {
	select {
	case <-w.d.stop:
		return errStopped
	default:
		return nil
	}
}

// decisions runs a store's decision scripts: the coalesced ones on their
// callers' goroutines (runHere), the others on kept worker goroutines (up
// to maxDecisionWorkers; past them a decision gets a goroutine of its
// own); a pool of decisions, and one watchdog that has the node of a
// decision outstanding half its bound asked (Store.ask) and expires those
// still outstanding at their deadline. The watchdog sleeps until the
// earliest of those times it knows of, so under a steady stream of
// answers it wakes about twice per bound, not once per call.
type decisions struct {
	once    sync.Once
	closed  <-chan struct{}
	late    lateness
	jobs    chan *decision
	workers atomic.Int32
	pool    sync.Pool

	mu      sync.Mutex
	head    *decision // outstanding decisions, oldest first
	tail    *decision
	target  time.Time // when the watchdog wakes next; zero when idle
	stopped bool      // the watchdog left, the store closed and nothing outstanding
	wake    chan struct{}
}

// maxDecisionWorkers bounds the kept workers: far above the decisions a
// daemon has in flight against a Redis that answers.
const maxDecisionWorkers = 256

// begin starts the watchdog, on the store's first decision.
func (w *decisions) begin(s *Store) {
	w.once.Do(func() {
		w.closed, w.jobs, w.wake = s.out.Closed(), make(chan *decision), make(chan struct{}, 1)
		w.late = s.lateness()
		go w.watch()
	})
}

// start hands d to a worker, and to the watchdog.
func (w *decisions) start(s *Store, d *decision) {
	w.begin(s)
	w.watchFor(d)
	select {
	case w.jobs <- d:
		return
	default:
	}
	if w.workers.Add(1) <= maxDecisionWorkers {
		go w.work(d)
		return
	}
	w.workers.Add(-1)
	go d.run()
}

// runHere sends d's script, coalesced on p, and waits for its reply on
// the caller's goroutine, with the caller's ctx: two hand-offs to a worker
// and back cost more than the script's share of the round trip. A wait
// that ends first (ctx ends, or the watchdog ends d) leaves the reply to
// a goroutine of d's own, as a worker would wait for it.
func (w *decisions) runHere(ctx context.Context, s *Store, p *coalescer, d *decision) {
	w.begin(s)
	w.watchFor(d)
	f, cmd := p.send(d, d.sc, d.keys, d.args)
	leave := context.AfterFunc(ctx, d.stopFn)
	err := f.WaitContext(waiting{d})
	d.stray = !leave()
	if err == errStopped {
		go func() {
			err := f.Wait()
			d.end(p.answer(d, d.sc, d.keys, d.args, cmd, err))
		}()
		return
	}
	d.end(p.answer(d, d.sc, d.keys, d.args, cmd, err))
}

// work runs d, then every decision handed to it, until the store closes.
func (w *decisions) work(d *decision) {
	for {
		d.run()
		select {
		case d = <-w.jobs:
		case <-w.closed:
			w.workers.Add(-1)
			return
		}
	}
}

func (w *decisions) get() *decision {
	if d, ok := w.pool.Get().(*decision); ok {
		return d
	}
	d := &decision{reply: make(chan struct{}, 1), stop: make(chan struct{})}
	d.stopFn = d.stopWaiting
	return d
}

// put returns an answered decision, whose worker is done with it, to the
// pool: unless a stopFn for its last caller's ctx may still run. Its stop
// is still open: only that stopFn or the watchdog (which answers nothing)
// closes it.
func (w *decisions) put(d *decision) {
	if d.stray {
		return
	}
	d.parent, d.s, d.n, d.keys, d.args, d.res, d.err, d.queued = nil, nil, nil, nil, nil, nil, nil, nil
	d.state.Store(decisionPending)
	w.pool.Put(d)
}

// watchFor adds d to the outstanding decisions, waking the watchdog when
// it is idle or sleeps past d's deadline.
func (w *decisions) watchFor(d *decision) {
	w.mu.Lock()
	d.prev, d.next = w.tail, nil
	if w.tail != nil {
		w.tail.next = d
	} else {
		w.head = d
	}
	w.tail = d
	early := w.target.IsZero() || d.deadline.Before(w.target)
	if early {
		w.target = d.deadline
	}
	restart := w.stopped
	w.stopped = false
	w.mu.Unlock()
	if restart {
		go w.watch()
	}
	if early {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// unwatch removes d from the outstanding decisions, if it is there.
func (w *decisions) unwatch(d *decision) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unwatchLocked(d)
}

func (w *decisions) unwatchLocked(d *decision) {
	if d.prev == nil && w.head != d {
		return
	}
	if d.prev != nil {
		d.prev.next = d.next
	} else {
		w.head = d.next
	}
	if d.next != nil {
		d.next.prev = d.prev
	} else {
		w.tail = d.prev
	}
	d.prev, d.next = nil, nil
}

// watch is the watchdog: it expires the decisions past their deadline
// and sleeps until the next one's, or until woken. Once the store is
// closed it leaves when nothing is outstanding (a later decision starts
// it again).
func (w *decisions) watch() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	closed := w.closed
	for {
		next, stop := w.expireDue(closed == nil)
		if stop {
			return
		}
		if next.IsZero() {
			t.Stop()
		} else {
			t.Reset(time.Until(next))
		}
		select {
		case <-t.C:
		case <-w.wake:
		case <-closed:
			closed = nil
		}
	}
}

// expireDue has the nodes of the decisions outstanding half their bound
// asked (outage.Node.Ask), expires those past their deadline and returns
// the earliest ask or deadline left (zero: none outstanding, idle); or
// stop, when nothing is outstanding and closing says the store closed.
// A pass that begins well after the time it was due says the daemon ran
// late (lateness.check), before the decisions it finds due are judged.
func (w *decisions) expireDue(closing bool) (next time.Time, stop bool) {
	var due []*decision
	var ask []asking
	now := time.Now()
	soonest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	w.mu.Lock()
	if !w.target.IsZero() {
		w.late.check(w.target, now)
	}
	for d := w.head; d != nil; {
		after := d.next
		switch {
		case now.Before(d.askAt()):
			soonest(d.askAt())
		case now.Before(d.deadline):
			soonest(d.deadline)
			if d.n.Ask(d.sent(), now) { // d may be answered and reused once w.mu is let go
				ask = append(ask, asking{d.s, d.n, d.name, d.bound})
			}
		case d.state.CompareAndSwap(decisionPending, decisionExpired):
			w.unwatchLocked(d)
			due = append(due, d)
		}
		d = after
	}
	w.target = next
	stop = closing && w.head == nil
	w.stopped = stop
	w.mu.Unlock()
	for _, a := range ask {
		go a.s.ask(w, a.n, a.name, now, a.bound)
	}
	for _, d := range due {
		d.expire()
	}
	return next, stop
}

// lateness is how the store sees its own time: a daemon on a starved
// host (or one stopped and resumed) reads Redis's replies late, and
// would take the decisions it could not read in time for Redis failing.
// Its own timers and goroutines, late by after or more, say it ran late
// (outage.Memory.RanLate): the decisions sent before then begin no
// outage. The ones sent after still do, so a stall is still found, one
// bound later.
type lateness struct {
	mem   *outage.Memory
	bound time.Duration // the decision timeout
	after time.Duration
	log   *slog.Logger
}

// lateness is the store's: late by LateAfter its decision timeout.
func (s *Store) lateness() lateness {
	return lateness{mem: s.out, bound: s.o.DecisionTimeout, after: LateAfter(s.o.DecisionTimeout), log: s.log()}
}

// LateAfter is how late a daemon with decision timeout bound must find
// its own timers and goroutines to say it ran late: half the bound, far
// past a timer's lateness on a busy host that keeps time (milliseconds,
// tens of them under load), and as long as the half bound a decision's
// ask has (Store.ask), which such a daemon could not have run in.
func LateAfter(bound time.Duration) time.Duration { return bound / 2 }

// lateSaidEvery is how far apart the warnings of a daemon that keeps
// running late are, at least.
const lateSaidEvery = time.Minute

// check notes that the daemon ran late when something due at due runs
// only at now, after or more late, and warns unless it did within
// lateSaidEvery.
func (l lateness) check(due, now time.Time) {
	late := now.Sub(due)
	if late < l.after {
		return
	}
	if before := l.mem.RanLate(now); now.Sub(before) > lateSaidEvery {
		l.log.Warn("this daemon ran late (a starved host, or a stopped process): the decisions it sent before now that failed are not taken as redis failing",
			"late", late.Round(time.Millisecond), "decision_timeout", l.bound)
	}
}

// asking is what an ask (Store.ask) needs of the decision it is for.
type asking struct {
	s     *Store
	n     *outage.Node
	name  string
	bound time.Duration
}

// release ends the decisions outstanding on n, whose outage has begun:
// each caller is answered from memory now (AllowUnder, Record), not when
// its script's bound passes. A decision sent just before its node was
// judged down would otherwise wait out a whole bound of its own, past a
// caller whose deadline is close to it.
func (w *decisions) release(n *outage.Node) {
	var out []*decision
	w.mu.Lock()
	for d := w.head; d != nil; {
		after := d.next
		if d.n == n && d.state.CompareAndSwap(decisionPending, decisionReleased) {
			w.unwatchLocked(d)
			out = append(out, d)
		}
		d = after
	}
	w.mu.Unlock()
	for _, d := range out {
		d.release()
	}
}

// judge notes the outcome err of the decision script sent seq-th to n
// for breaker name (outage.Node.Judge): a failure counts when the memory
// answers for it (OutageMemory) and Redis could not serve the call
// (IsUnavailable); one that begins an outage sends n to memory.
func (s *Store) judge(n *outage.Node, name string, seq int64, sent time.Time, err error) {
	if n.Judge(seq, sent, err, s.o.Outage == OutageMemory && IsUnavailable(err)) {
		s.enterOutage(n, name, err)
	}
}

// ask asks n, whose decision for breaker name has been outstanding half
// its bound, whether it answers a fresh connection as the recovery poll
// asks it (answers), within the other half, and reports it
// (outage.Node.Asked); then wakes the watchdog w, for the decisions whose
// ask waited for this one. A node that answers while a decision waits
// leaves that decision late on this daemon's side (a connection of its
// pool, a CPU), not Redis away: its failure begins no outage. So does an
// ask that itself starts late (lateness). How long the ask took says
// nothing of the daemon: a stalled node may hold it past its context.
func (s *Store) ask(w *decisions, n *outage.Node, name string, began time.Time, bound time.Duration) {
	w.late.check(began, time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), bound/2)
	defer cancel()
	n.Asked(began, s.answers(ctx, n, KeysOf(name).State) == outage.PollAnswered)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// checkFailed notes a health check (Check) that Redis could not serve:
// on a single Redis, whose one node every decision goes to, it is an
// outage at once (a check is bounded by a whole health interval, far past
// any decision's bound). On a Cluster the check asks every node at once
// and cannot say which failed: each node is judged by its calls.
func (s *Store) checkFailed(err error) {
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster || s.o.Outage != OutageMemory || !IsUnavailable(err) {
		return
	}
	s.enterOutage(s.nodeOf(context.Background(), ""), "", fmt.Errorf("health check: %w", err))
}

// inMemory reports whether a decision for n that failed with err (and
// was judged) is to be answered from memory: n is in an outage, err says
// Redis could not serve it, and the caller still waits.
func (s *Store) inMemory(ctx context.Context, n *outage.Node, err error) bool {
	return s.o.Outage == OutageMemory && ctx.Err() == nil && n.Down() && IsUnavailable(err)
}

// probeClient returns a client of its own to the node the client c
// reaches, for the recovery poll: one connection, no retry, every
// command bounded by its context. The poll then never waits behind the
// connections stuck on a stalled node (which go-redis keeps until its
// read timeout), and a node that answers again is seen on a fresh
// connection, as the next decisions will reach it. Close it when done.
// It asks for no maintenance notifications, with a setting of its own:
// c's is the one go-redis changes, under c's lock, when a node refuses
// them, and NewClient would read it unlocked.
func probeClient(c *redis.Client) *redis.Client {
	o := *c.Options()
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxConcurrentDials = 1, 0, 1, 0
	o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled = -1, 1, true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return redis.NewClient(&o)
}
