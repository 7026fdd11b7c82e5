package soak

import (
	"net"
	"testing"
	"time"
)

// A node that accepts connections and never answers shows in the pulse
// as late spans of its own, each at least PulseLate long; stop ends the
// PING still waiting on it.
func TestPulseSeesANodeThatDoesNotAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	a := ln.Addr().String()
	p := startPulse([]string{a})
	defer p.stop()
	for p.spans(a) == 0 {
		time.Sleep(10 * time.Millisecond) // a span needs a PING PulseLate old
	}
	late := p.stop()
	for _, s := range late[a] {
		if s.To.Sub(s.From) < PulseLate {
			t.Errorf("span %s long, shorter than PulseLate %s", s.To.Sub(s.From), PulseLate)
		}
	}
}

// note keeps a span only from PulseLate on.
func TestPulseKeepsOnlyLateSpans(t *testing.T) {
	p := &pulse{late: Late{}}
	p.note("m1", at(0), at(0).Add(PulseLate-time.Millisecond))
	p.note("m1", at(0), at(0).Add(PulseLate))
	if n := len(p.late["m1"]); n != 1 {
		t.Errorf("%d spans kept, want 1", n)
	}
}
