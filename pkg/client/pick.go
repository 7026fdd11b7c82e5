package client

import (
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
//     reconnects in the background.
//
// Streams (Watch) are placed as round robin would and never judged.
const answeringPolicy = "breakerd_answering"

// slowAfter is how long a call may be outstanding on a daemon before the
// next calls prefer another: the default Allow budget.
const slowAfter = DefaultAllowBudget

// hungBackoff bounds how long a daemon that answered nothing within a
// call's deadline is passed over.
const hungBackoff, hungBackoffMax = time.Second, 30 * time.Second

func init() {
	balancer.Register(base.NewBalancerBuilder(answeringPolicy, answeringBuilder{}, base.Config{}))
}

type answeringBuilder struct{}

func (answeringBuilder) Build(info base.PickerBuildInfo) balancer.Picker {
	if len(info.ReadySCs) == 0 {
		return base.NewErrPicker(balancer.ErrNoSubConnAvailable)
	}
	p := &answeringPicker{}
	for sc := range info.ReadySCs {
		p.daemons = append(p.daemons, &daemonConn{sc: sc, pending: map[uint64]time.Time{}})
	}
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
}

func (p *answeringPicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	n := uint64(len(p.daemons))
	start := p.next.Add(1)
	if strings.HasSuffix(info.FullMethodName, "/Watch") {
		return balancer.PickResult{SubConn: p.daemons[start%n].sc}, nil
	}
	now := time.Now()
	d := p.daemons[start%n] // every daemon passed over: round robin
	for i := range n {
		if c := p.daemons[(start+i)%n]; c.answering(now) {
			d = c
			break
		}
	}
	id := d.begin(now)
	return balancer.PickResult{SubConn: d.sc, Done: func(di balancer.DoneInfo) { d.end(id, di) }}, nil
}

// answering reports whether the daemon is neither hung nor slow at now.
func (d *daemonConn) answering(now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if now.Before(d.hungUntil) {
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
// answered strikes the daemon, any answer clears its strikes.
func (d *daemonConn) end(id uint64, di balancer.DoneInfo) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.pending, id)
	switch {
	case di.BytesReceived:
		d.strikes, d.hungUntil = 0, time.Time{}
	case status.Code(di.Err) == codes.DeadlineExceeded:
		d.strikes++
		d.hungUntil = time.Now().Add(min(hungBackoff<<min(d.strikes-1, 5), hungBackoffMax))
	}
}
