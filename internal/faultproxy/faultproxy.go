// Package faultproxy is a TCP proxy that injects a peer's faults between a
// client and its server: a link cut (connections refused), a link that
// stalls (nothing forwarded, connections kept open: a blackhole) and a
// slow one (each reply forwarded a fixed delay after it was read). The
// tests use it through testredis.Proxy; the soak puts it in front of a
// Redis node.
package faultproxy

import (
	"bytes"
	"net"
	"sync"
	"time"
)

// Proxy forwards connections to a target address, with faults switched
// on and off while it runs. Its methods are safe for concurrent use.
type Proxy struct {
	addr   string // the proxy's own address, stable across Cut/Restore
	target string

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]struct{}
	stalled bool
	// delay holds back every reply (target to client) this long,
	// reqDelay every request (client to target).
	delay, reqDelay time.Duration
}

// New starts a proxy to target listening on listen ("127.0.0.1:0": a
// free loopback port). Close stops it.
func New(listen, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{addr: ln.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	return p, nil
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.addr }

// Close stops listening and closes every connection (Cut); Restore
// listens again.
func (p *Proxy) Close() { p.Cut() }

// Cut closes every connection and stops listening: clients get connection
// refused until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	p.dropLocked()
}

func (p *Proxy) dropLocked() {
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

// Stall keeps every connection open but forwards nothing (a blackholed
// link), so every command times out; new connections are accepted and
// stay silent. Resume or Restore ends it.
func (p *Proxy) Stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

// Resume forwards again on the connections a Stall held open, without
// closing them: a link that heals. What was swallowed stays lost, so a
// command sent during the stall never gets its reply; connections
// accepted during the stall stay silent.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.stalled = false
	p.mu.Unlock()
}

// Delay holds back every reply from the target by d (0: none): requests
// reach the target at once, and each chunk of reply is forwarded d after
// it was read, in order (a slow link or server, not a queue: the delay
// does not add up under load). Restore ends it too.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// DelayRequests holds back every request to the target by d (0: none),
// as Delay does replies: with both, a link slow each way.
func (p *Proxy) DelayRequests(d time.Duration) {
	p.mu.Lock()
	p.reqDelay = d
	p.mu.Unlock()
}

// Restore ends a Stall or a delay, dropping every connection (clients
// redial; a stalled stream lost bytes), and listens again on the same
// address after a Cut.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	p.stalled, p.delay, p.reqDelay = false, 0, 0
	p.dropLocked()
	listening := p.ln != nil
	p.mu.Unlock()
	if listening {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.serve(ln)
	return nil
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns[c] = struct{}{}
			stalled := p.stalled
			p.mu.Unlock()
			if !stalled {
				go p.forward(c)
			}
		}
	}()
}

func (p *Proxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	go p.pipe(up, c, false)
	go p.pipe(c, up, true)
}

// faults returns whether the proxy is stalled and the delay of a reply
// (reply) or of a request.
func (p *Proxy) faults(reply bool) (bool, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if reply {
		return p.stalled, p.delay
	}
	return p.stalled, p.reqDelay
}

// pipe copies src to dst until either closes (a Cut, a Restore):
// nothing while stalled (swallowed: it never reaches dst), and each
// chunk its direction's delay after it was read.
func (p *Proxy) pipe(dst, src net.Conn, reply bool) {
	type chunk struct {
		b   []byte
		due time.Time
	}
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				return
			}
			stalled, delay := p.faults(reply)
			if stalled {
				continue
			}
			q <- chunk{bytes.Clone(buf[:n]), time.Now().Add(delay)}
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
