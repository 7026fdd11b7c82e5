package testredis

import (
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/faultproxy"
)

// Delay is a TCP proxy that forwards everything, each chunk late by the
// latency it has when the chunk is read, in each direction, in order: a
// slow peer (one that answers, late), where Proxy makes one that refuses
// or stalls.
type Delay struct {
	p *faultproxy.Proxy
}

// NewDelay starts a delaying proxy to target on a free loopback port,
// adding latency each way (SetLatency changes it). It is closed when t
// ends.
func NewDelay(t testing.TB, target string, latency time.Duration) *Delay {
	t.Helper()
	p, err := faultproxy.New("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	d := &Delay{p: p}
	d.SetLatency(latency)
	return d
}

// Addr is where clients connect.
func (d *Delay) Addr() string { return d.p.Addr() }

// SetLatency sets the latency added each way to what is read from now on.
func (d *Delay) SetLatency(l time.Duration) {
	d.p.Delay(l)
	d.p.DelayRequests(l)
}
