package faultproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo starts a line echo server, closed when t ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(l)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// ask sends a line through c and reads the echo, waiting at most wait.
func ask(t *testing.T, c net.Conn, r *bufio.Reader, line string, wait time.Duration) (string, error) {
	t.Helper()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	return r.ReadString('\n')
}

// Each fault does what it says on the wire: a stall swallows what is
// sent (no reply, the connection open), Resume forwards again on the same
// connection, a delay holds each reply (or request) back at least its
// delay, Cut
// refuses, Restore listens again.
func TestFaults(t *testing.T) {
	p, err := New("127.0.0.1:0", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := ask(t, c, r, "one", 10*time.Second); err != nil || got != "one\n" {
		t.Fatalf("forwarding: %q, %v", got, err)
	}
	p.Stall()
	if got, err := ask(t, c, r, "swallowed", 200*time.Millisecond); err == nil {
		t.Fatalf("stalled: got %q, want no reply", got)
	}
	p.Resume()
	if got, err := ask(t, c, r, "two", 10*time.Second); err != nil || got != "two\n" {
		t.Fatalf("resumed: %q, %v; want two (the swallowed line lost)", got, err)
	}
	const d = 300 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	if got, err := ask(t, c, r, "late", 10*time.Second); err != nil || got != "late\n" || time.Since(start) < d {
		t.Fatalf("delayed: %q, %v after %v; want late, after at least %v", got, err, time.Since(start), d)
	}
	p.Delay(0)
	p.DelayRequests(d)
	start = time.Now()
	if got, err := ask(t, c, r, "slow", 10*time.Second); err != nil || got != "slow\n" || time.Since(start) < d {
		t.Fatalf("request delayed: %q, %v after %v; want slow, after at least %v", got, err, time.Since(start), d)
	}
	p.Cut()
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		_ = c2.Close()
		t.Fatal("cut: a connection was accepted")
	}
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := ask(t, c3, bufio.NewReader(c3), "back", 10*time.Second); err != nil || got != "back\n" {
		t.Fatalf("restored: %q, %v", got, err)
	}
}
