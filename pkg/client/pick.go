package client

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// answeringPolicy is the load-balancing policy of a client given several
// daemons (serviceConfig): round robin over the connected daemons that
// answer, so that a daemon that hangs (accepts calls, answers none) is
// failed over like one that refuses (docs/go-client.md#slow-and-hung-daemons):
//
//   - a daemon with a call outstanding past slowAfter is passed over
//     while another is not (a slow daemon still gets the calls when every
//     daemon is as slow);
//   - a daemon that let a call run out its deadline with no byte of
//     answer is passed over for a backoff (1s, doubling to 30s); after
//     it, one call tries it again. The connection's keepalive
//     (keepaliveTime) closes a hung daemon's connection, and grpc then
//     reconnects in the background;
//   - a daemon that comes back (its connection was ready before, was
//     lost, and is ready again: a restart) while another answers gets
//     no call a caller waits on within a budget (Allow, Available:
//     budgeted) until it has answered a call with no such budget
//     (Record, a late answer's release) within slowAfter: a daemon cold
//     from its start costs no caller its budget, so a rejoin is as quiet
//     as the loss.
//
// Streams (Watch) are placed as round robin would and never judged.
const answeringPolicy = "breakerd_answering"

// slowAfter is how long a call may be outstanding on a daemon before the
// next calls prefer another: the default Allow budget.
const slowAfter = DefaultAllowBudget

// hungBackoff bounds how long a daemon that answered nothing within a
// call's deadline is passed over.
const hungBackoff, hungBackoffMax = time.Second, 30 * time.Second

// recheckAfter is the client's one re-check schedule, for a hung daemon and
// for the whole client once no daemon answers (reconnect): the wait
// before the n-th re-check (from 0) is base, doubled n times, at most
// hungBackoffMax (base itself when larger).
func recheckAfter(base time.Duration, n int) time.Duration {
	d := base
	for ; n > 0 && d < hungBackoffMax; n-- {
		d *= 2
	}
	return min(d, max(base, hungBackoffMax))
}

func init() {
	balancer.Register(answeringBuilder{})
}

// answeringBuilder builds one answeringPolicy balancer per connection,
// each with its own memory of its daemons (answeringPickers), on grpc's
// base balancer.
type answeringBuilder struct{}

func (answeringBuilder) Name() string { return answeringPolicy }

func (answeringBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	pb := &answeringPickers{conns: map[balancer.SubConn]*daemonConn{}, ever: map[balancer.SubConn]bool{}}
	return base.NewBalancerBuilder(answeringPolicy, pb, base.Config{}).Build(cc, opts)
}

// answeringPickers builds the pickers of one connection: what it knows
// of a daemon (its strikes, its calls in flight) lasts across pickers
// while the daemon stays ready, and a daemon ready again after it was
// lost starts on probation.
type answeringPickers struct {
	mu    sync.Mutex
	conns map[balancer.SubConn]*daemonConn // the last picker's daemons
	ever  map[balancer.SubConn]bool        // every daemon ever ready
}

func (b *answeringPickers) Build(info base.PickerBuildInfo) balancer.Picker {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(info.ReadySCs) == 0 {
		b.conns = map[balancer.SubConn]*daemonConn{}
		return base.NewErrPicker(balancer.ErrNoSubConnAvailable)
	}
	p := &answeringPicker{}
	conns := map[balancer.SubConn]*daemonConn{}
	for sc := range info.ReadySCs {
		d := b.conns[sc]
		if d == nil {
			d = &daemonConn{sc: sc, pending: map[uint64]time.Time{}}
			// Back after a loss while another daemon answers: on probation.
			d.probation = b.ever[sc] && len(b.conns) > 0
		}
		b.ever[sc] = true
		conns[sc] = d
		p.daemons = append(p.daemons, d)
	}
	b.conns = conns
	p.next.Store(rand.Uint64())
	return p
}

type answeringPicker struct {
	daemons []*daemonConn
	next    atomic.Uint64
}

// daemonConn is what the picker knows of one daemon's connection.
type daemonConn struct {
	sc balancer.SubConn

	mu        sync.Mutex
	pending   map[uint64]time.Time // unary calls in flight, by id: when picked
	ids       uint64
	hungUntil time.Time // passed over until then
	strikes   int       // calls in a row that ran out their deadline unanswered
	probation bool      // back after a loss: no budgeted call until it answers one other in time
}

// budgetedKey marks the context of a call whose caller waits for it
// within a budget shorter than the call (Client.ask).
type budgetedKey struct{}

func withBudget(ctx context.Context) context.Context {
	return context.WithValue(ctx, budgetedKey{}, true)
}

func budgeted(ctx context.Context) bool {
	b, _ := ctx.Value(budgetedKey{}).(bool)
	return b
}

func (p *answeringPicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	n := uint64(len(p.daemons))
	start := p.next.Add(1)
	if strings.HasSuffix(info.FullMethodName, "/Watch") {
		return balancer.PickResult{SubConn: p.daemons[start%n].sc}, nil
	}
	now := time.Now()
	waited := budgeted(info.Ctx)
	d := p.passedOver(now, start, waited) // every daemon passed over
	if c := p.onProbation(now, waited); c != nil {
		d = c // a call no caller waits on is its trial
	} else {
		for i := range n {
			if c := p.daemons[(start+i)%n]; c.answering(now, waited) {
				d = c
				break
			}
		}
	}
	id := d.begin(now)
	return balancer.PickResult{SubConn: d.sc, Done: func(di balancer.DoneInfo) { d.end(id, di) }}, nil
}

// passedOver is where a call goes when no daemon answers in time: round
// robin from start, over the daemons neither hung nor, for a budgeted
// call, on probation (merely slow ones), or over all of them when none
// is left.
func (p *answeringPicker) passedOver(now time.Time, start uint64, budgeted bool) *daemonConn {
	n := uint64(len(p.daemons))
	for i := range n {
		d := p.daemons[(start+i)%n]
		d.mu.Lock()
		ok := !now.Before(d.hungUntil) && !(budgeted && d.probation)
		d.mu.Unlock()
		if ok {
			return d
		}
	}
	return p.daemons[start%n]
}

// onProbation is a daemon on probation that answers, for a call with no
// budget (waited false) to try; nil when there is none.
func (p *answeringPicker) onProbation(now time.Time, waited bool) *daemonConn {
	if waited {
		return nil
	}
	for _, d := range p.daemons {
		d.mu.Lock()
		on := d.probation
		d.mu.Unlock()
		if on && d.answering(now, false) {
			return d
		}
	}
	return nil
}

// answering reports whether the daemon is neither hung nor slow at now,
// nor, for a budgeted call, on probation.
func (d *daemonConn) answering(now time.Time, budgeted bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if now.Before(d.hungUntil) || budgeted && d.probation {
		return false
	}
	for _, at := range d.pending {
		if now.Sub(at) > slowAfter {
			return false
		}
	}
	return true
}

func (d *daemonConn) begin(now time.Time) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ids++
	d.pending[d.ids] = now
	return d.ids
}

// end takes a call's end: one that ran out its deadline with no byte
// answered strikes the daemon, any answer clears its strikes, and one
// answered within slowAfter ends a probation.
func (d *daemonConn) end(id uint64, di balancer.DoneInfo) {
	d.mu.Lock()
	defer d.mu.Unlock()
	picked := d.pending[id]
	delete(d.pending, id)
	switch {
	case di.BytesReceived:
		if time.Since(picked) <= slowAfter {
			d.probation = false
		}
		d.strikes, d.hungUntil = 0, time.Time{}
	case status.Code(di.Err) == codes.DeadlineExceeded:
		d.strikes++
		d.hungUntil = time.Now().Add(recheckAfter(hungBackoff, d.strikes-1))
	}
}
