package soak

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/breakerd/breakerd/internal/faultproxy"
)

// The stall's proxy runs in a process of its own ("breakerd-soak proxy
// <target>", ServeProxy), not in the soak's: the soak's workers and
// observer keep its process busy, and on a loaded host a proxy among
// them forwarded replies late enough, with no fault injected, that the
// daemons rightly took its node for a stalled one. A process that does
// nothing else is scheduled as soon as a reply arrives.

// ServeProxy runs a faultproxy.Proxy to target: it prints the address it
// listens on, then serves one command per line read from ctl, answering
// each with "ok" or "error: ..." on out, until ctl ends:
//
//	stall        forward nothing, keep the connections (Proxy.Stall)
//	delay <d>    hold back every reply by d, a Go duration (Proxy.Delay)
//	restore      end a stall or a delay, dropping every connection
func ServeProxy(target string, ctl io.Reader, out io.Writer) error {
	p, err := faultproxy.New("127.0.0.1:0", target)
	if err != nil {
		return err
	}
	defer p.Close()
	if _, err := fmt.Fprintln(out, p.Addr()); err != nil {
		return err
	}
	lines := bufio.NewScanner(ctl)
	for lines.Scan() {
		if _, err := fmt.Fprintln(out, answer(p, lines.Text())); err != nil {
			return err
		}
	}
	return lines.Err()
}

// answer carries out one command of ServeProxy's on p.
func answer(p *faultproxy.Proxy, line string) string {
	cmd, arg, _ := strings.Cut(line, " ")
	switch cmd {
	case "stall":
		p.Stall()
	case "delay":
		d, err := time.ParseDuration(arg)
		if err != nil {
			return "error: " + err.Error()
		}
		p.Delay(d)
	case "restore":
		if err := p.Restore(); err != nil {
			return "error: " + err.Error()
		}
	default:
		return fmt.Sprintf("error: unknown command %q", line)
	}
	return "ok"
}

// proxyProc is a stall's proxy in its own process (ServeProxy).
type proxyProc struct {
	addr string
	cmd  *exec.Cmd
	ctl  io.WriteCloser
	out  *bufio.Scanner
}

// startProxy starts self's proxy to target and waits for its address.
func startProxy(self, target string) (*proxyProc, error) {
	cmd := exec.Command(self, "proxy", target)
	ctl, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the proxy to %s: %w", target, err)
	}
	p := &proxyProc{cmd: cmd, ctl: ctl, out: bufio.NewScanner(stdout)}
	addr, err := p.line()
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("the proxy to %s printed no address: %w", target, err)
	}
	p.addr = addr
	return p, nil
}

// proxyAnswerWithin bounds each wait on the proxy's process: its
// address, an answer to a command, its exit once its commands end. A
// process that does nothing else answers in microseconds; one that does
// not within this is killed, and the wait fails.
var proxyAnswerWithin = 10 * time.Second // a variable for the hung-proxy test

// line is the proxy's next line of output, read within
// proxyAnswerWithin; at that bound the process is killed (which ends
// the read) and line fails.
func (p *proxyProc) line() (string, error) {
	read := make(chan error, 1)
	go func() {
		if !p.out.Scan() {
			read <- fmt.Errorf("no line (%v)", p.out.Err())
			return
		}
		read <- nil
	}()
	select {
	case err := <-read:
		if err != nil {
			return "", err
		}
		return p.out.Text(), nil
	case <-time.After(proxyAnswerWithin):
		_ = p.cmd.Process.Kill()
		<-read
		return "", fmt.Errorf("no line within %s: killed", proxyAnswerWithin)
	}
}

// Addr is where clients connect.
func (p *proxyProc) Addr() string { return p.addr }

// send has the proxy carry out one command (ServeProxy) and waits for it.
func (p *proxyProc) send(command string) error {
	if _, err := fmt.Fprintln(p.ctl, command); err != nil {
		return fmt.Errorf("proxy %s: %s: %w", p.addr, command, err)
	}
	a, err := p.line()
	if err != nil {
		return fmt.Errorf("proxy %s: %s: %w", p.addr, command, err)
	}
	if a != "ok" {
		return fmt.Errorf("proxy %s: %s: %s", p.addr, command, a)
	}
	return nil
}

// Stall, Delay and Restore are faultproxy.Proxy's, in its process.
func (p *proxyProc) Stall() error                { return p.send("stall") }
func (p *proxyProc) Delay(d time.Duration) error { return p.send("delay " + d.String()) }
func (p *proxyProc) Restore() error              { return p.send("restore") }

// Close ends the proxy's process: it leaves when its commands end, or is
// killed when it has not within proxyAnswerWithin.
func (p *proxyProc) Close() {
	_ = p.ctl.Close()
	exited := time.AfterFunc(proxyAnswerWithin, func() { _ = p.cmd.Process.Kill() })
	defer exited.Stop()
	_ = p.cmd.Wait()
}
