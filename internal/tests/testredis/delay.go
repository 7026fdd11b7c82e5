package testredis

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Delay is a TCP proxy that forwards everything, each chunk late by the
// latency it has when the chunk is read, in each direction, in order: a
// slow peer (one that answers, late), where Proxy makes one that refuses
// or stalls.
type Delay struct {
	addr    string
	target  string
	latency atomic.Int64 // each way

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	done  bool
}

// NewDelay starts a delaying proxy to target on a free loopback port,
// adding latency each way (SetLatency changes it). It is closed when t
// ends.
func NewDelay(t testing.TB, target string, latency time.Duration) *Delay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &Delay{addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	d.latency.Store(int64(latency))
	go d.serve()
	t.Cleanup(d.close)
	return d
}

// Addr is where clients connect.
func (d *Delay) Addr() string { return d.addr }

// SetLatency sets the latency added each way to what is read from now on.
func (d *Delay) SetLatency(l time.Duration) { d.latency.Store(int64(l)) }

func (d *Delay) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.done = true
	_ = d.ln.Close()
	for c := range d.conns {
		_ = c.Close()
	}
}

// track registers c to be closed with the proxy; false when it is closed.
func (d *Delay) track(c net.Conn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		_ = c.Close()
		return false
	}
	d.conns[c] = struct{}{}
	return true
}

func (d *Delay) serve() {
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", d.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !d.track(c) || !d.track(up) {
			_ = up.Close()
			continue
		}
		go d.pipe(up, c)
		go d.pipe(c, up)
	}
}

// pipe copies src to dst, each chunk written its latency after it was read.
func (d *Delay) pipe(dst, src net.Conn) {
	type chunk struct {
		b   []byte
		due time.Time
	}
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{buf[:n], time.Now().Add(time.Duration(d.latency.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	defer dst.Close()
	defer src.Close()
	for ch := range q {
		time.Sleep(time.Until(ch.due))
		if _, err := dst.Write(ch.b); err != nil {
			return
		}
	}
}
