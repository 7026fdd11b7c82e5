package client

import (
	"sync"
	"time"

	"github.com/breakerd/breakerd/internal/breaker"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// knownLimit bounds the breakers the client remembers as denying: past
// it a new one replaces one already held (breakers that deny are few; a
// closed breaker is never held).
const knownLimit = 4096

// lastKnown is what the client last heard breakerd say about the breakers it
// uses that deny calls: every answer, in time or late, and every Watch
// event updates it. It serves two rules (docs/go-client.md#slow-and-hung-daemons):
//
//   - at a breaker last known open whose probe is due, Allow waits for
//     breakerd up to the RPC timeout, not the Allow budget: only breakerd
//     can grant the fleet's one probe;
//   - when no daemon answers, the fallback denies such a breaker until the
//     known deny-until, and after it lets one call through per client
//     until that call's outcome (or the local probe timeout).
//
// It is safe for concurrent use.
type lastKnown struct {
	mu sync.Mutex
	m  map[string]*knownEntry
	// bound ends a denial heard with no end (forced open, paused): it is
	// held that long after it was heard, then judged as due.
	bound time.Duration
	// probeTimeout frees the fallback's one call when its outcome never
	// comes.
	probeTimeout time.Duration
}

type knownEntry struct {
	decision pb.Decision
	denial   *pb.Denial // breakerd's, on this client's clock; nil when not heard
	until    time.Time  // the client's clock: denied before, probe due from
	// probing is when the fallback let this client's one call through
	// (zero: none in flight).
	probing time.Time
}

func newKnown(bound, probeTimeout time.Duration) *lastKnown {
	return &lastKnown{m: map[string]*knownEntry{}, bound: bound, probeTimeout: probeTimeout}
}

// hear takes breakerd's answer p to an Allow sent at sent (the client's
// clock): a denial of the breaker for every worker is held until its
// retry_after, an ALLOWED forgets the breaker, and anything else (a
// PROBE, a suspect or parent denial, the fallback's own answers) leaves
// what was known.
func (k *lastKnown) hear(p *Permit, sent time.Time) {
	if p.Degraded {
		return
	}
	switch p.Decision {
	case pb.Decision_DECISION_ALLOWED:
		k.forget(p.Breaker)
	case pb.Decision_DECISION_DENIED_OPEN, pb.Decision_DECISION_DENIED_FORCED_OPEN,
		pb.Decision_DECISION_DENIED_PAUSED, pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT:
		until := sent.Add(p.RetryAfter)
		if p.RetryAfter <= 0 {
			until = sent.Add(k.bound)
		}
		k.deny(p.Breaker, p.Decision, p.Denial, until)
	}
}

// event takes a Watch event heard at now, judged by breakerd's own rule
// (breaker.View.Verdict) on the state the event carries: a breaker whose
// probe is due is held as due (its verdict says PROBE, which is no
// denial, yet only breakerd grants it); a denial is held until its end
// (one with no end, forced or paused, for the bound), with breakerd's
// words; one that lets calls through is forgotten.
func (k *lastKnown) event(e *pb.Event, now time.Time) {
	if e.GetShadow() {
		return
	}
	switch e.GetKind() {
	case pb.EventKind_EVENT_KIND_TRANSITION, pb.EventKind_EVENT_KIND_FORCED:
	default:
		return
	}
	name, st := e.GetBreaker(), e.GetState()
	v, policyShadow := breaker.ViewOfProto(st)
	vd := v.Verdict(breaker.Query{Now: max(v.Now, 1), PolicyShadow: policyShadow})
	switch {
	case vd.Due: // only breakerd can grant its probe
		d := vd.Decision
		if !vd.Denied() {
			d = pb.Decision_DECISION_DENIED_OPEN // held once the fallback's own call failed (settle)
		}
		k.deny(name, d, nil, now)
	case !vd.Denied():
		k.forget(name)
	default:
		until := now.Add(k.bound)
		if vd.Until != breaker.Forever {
			until = now.Add(time.Duration(vd.Until-v.Now) * time.Millisecond)
		}
		k.deny(name, vd.Decision, onClientClock(st.GetDenial(), st.GetAsOfMs(), now), until)
	}
}

func (k *lastKnown) deny(name string, d pb.Decision, den *pb.Denial, until time.Time) {
	if den.GetDecision() != d {
		den = nil // not this denial's words
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if e, ok := k.m[name]; ok {
		e.decision, e.denial, e.until = d, den, until
		return
	}
	if len(k.m) >= knownLimit {
		for n := range k.m { // any one: a map's order is random
			delete(k.m, n)
			break
		}
	}
	k.m[name] = &knownEntry{decision: d, denial: den, until: until}
}

func (k *lastKnown) forget(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, name)
}

// due reports whether breaker was last known denying and its deny-until
// has passed: only breakerd can grant its probe.
func (k *lastKnown) due(name string, now time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.m[name]
	return ok && !now.Before(e.until)
}

// fallback is what the fallback answers for a breaker known denying, when
// no daemon answered: the known denial before its deny-until (held, true);
// after it, probe true for the one call this client lets through until
// its outcome (settle), a probe-in-flight denial for the others. held
// false: nothing is known, the local breaker decides.
func (k *lastKnown) fallback(name string, now time.Time) (p *Permit, probe, held bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.m[name]
	if !ok {
		return nil, false, false
	}
	if now.Before(e.until) {
		d := e.denial // breakerd's last word, replayed
		if d == nil {
			d = fallbackDenial(e.decision, e.until.UnixMilli(), e.until.UnixMilli())
		}
		return &Permit{Breaker: name, Decision: e.decision, RetryAfter: wholeMs(e.until.Sub(now)), Degraded: true,
			Reason: d.GetReason(), Denial: d, at: now}, false, true
	}
	if !e.probing.IsZero() && now.Before(e.probing.Add(k.probeTimeout)) {
		d := fallbackDenial(pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT, e.probing.Add(k.probeTimeout).UnixMilli(), 0)
		return &Permit{Breaker: name, Decision: d.GetDecision(), Degraded: true, Reason: d.GetReason(), Denial: d, at: now}, false, true
	}
	e.probing = now
	return nil, true, true
}

// settle ends the fallback's one call through name with its outcome: a
// success forgets the breaker, anything else holds it denied for cooldown
// more.
func (k *lastKnown) settle(name string, o pb.Outcome, now time.Time, cooldown time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.m[name]
	if !ok {
		return
	}
	switch o {
	case pb.Outcome_OUTCOME_SUCCESS:
		delete(k.m, name)
	case pb.Outcome_OUTCOME_CANCELED:
		e.probing = time.Time{}
	default:
		e.probing, e.until = time.Time{}, now.Add(cooldown)
	}
}

// release frees the one call's slot without a verdict (the fallback's
// local breaker refused the call after all).
func (k *lastKnown) release(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e, ok := k.m[name]; ok {
		e.probing = time.Time{}
	}
}
