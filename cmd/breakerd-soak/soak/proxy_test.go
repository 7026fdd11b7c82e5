package soak

import (
	"bufio"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The stall's proxy process answers each command and forwards as
// faultproxy does; a command it cannot carry out is an error naming it.
func TestServeProxy(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	go func() {
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c) }()
		}
	}()
	ctlR, ctl := io.Pipe()
	outR, out := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- ServeProxy(target.Addr().String(), ctlR, out); _ = out.Close() }()
	lines := bufio.NewScanner(outR)
	if !lines.Scan() {
		t.Fatal("no address printed")
	}
	c, err := net.Dial("tcp", lines.Text())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct{ command, want string }{
		{"delay 20ms", "ok"},
		{"delay soon", `error: time: invalid duration "soon"`},
		{"flood", `error: unknown command "flood"`},
		{"delay 0s", "ok"},
	} {
		if _, err := io.WriteString(ctl, tc.command+"\n"); err != nil {
			t.Fatal(err)
		}
		if !lines.Scan() || lines.Text() != tc.want {
			t.Errorf("%s: answered %q, want %q", tc.command, lines.Text(), tc.want)
		}
	}
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if got, err := bufio.NewReader(c).ReadString('\n'); err != nil || strings.TrimSpace(got) != "ping" {
		t.Errorf("through the proxy: %q, %v, want ping", got, err)
	}
	_ = ctl.Close()
	if err := <-done; err != nil {
		t.Errorf("ServeProxy once its commands end: %v", err)
	}
}

// freePorts takes ports from the range given, past those taken.
func TestFreePortsWithin(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	p := taken.Addr().(*net.TCPAddr).Port
	got, err := freePorts(1, [2]int{p, p})
	if err == nil {
		t.Errorf("a range of one taken port gave %v, want an error", got)
	}
	got, err = freePorts(2, [2]int{p - 3, p + 3})
	if err != nil || len(got) != 2 {
		t.Fatalf("freePorts(2) around a taken port: %v, %v", got, err)
	}
	for _, g := range got {
		if g == p || g < p-3 || g > p+3 {
			t.Errorf("freePorts gave %d, want one of %d-%d but %d", g, p-3, p+3, p)
		}
	}
}

// A proxy process that hangs (prints nothing, never exits) is killed at
// proxyAnswerWithin, and the soak's wait on it fails instead of hanging.
func TestHungProxyIsKilled(t *testing.T) {
	self := filepath.Join(t.TempDir(), "hung")
	if err := os.WriteFile(self, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { proxyAnswerWithin = d }(proxyAnswerWithin)
	proxyAnswerWithin = 100 * time.Millisecond
	p, err := startProxy(self, "127.0.0.1:1")
	if err == nil {
		p.Close()
		t.Fatal("startProxy of a process that prints nothing succeeded")
	}
	if !strings.Contains(err.Error(), "killed") {
		t.Errorf("startProxy = %v, want the wait to end in a kill", err)
	}
}
