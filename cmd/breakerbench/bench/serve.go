package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/tracing"
)

// Server kinds that Serve runs in a process of their own, so that their
// CPU time can be read per scenario.
const (
	ServeDaemon  = "daemon"  // breakerd (daemon.Run)
	ServeCeiling = "ceiling" // the EVALSHA handler
	ServeNoop    = "noop"    // the gRPC no-op
)

// ServeProfiled is Serve, writing a pprof CPU profile of the server's
// whole life to the file profile (created or truncated; "" for none).
func ServeProfiled(ctx context.Context, kind, redisAddr, profile string, w io.Writer) error {
	if profile == "" {
		return Serve(ctx, kind, redisAddr, w)
	}
	f, err := os.Create(profile)
	if err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	defer pprof.StopCPUProfile()
	return Serve(ctx, kind, redisAddr, w)
}

// Serve runs one server of kind on a free loopback port against the
// Redis at redisAddr (unused by the no-op), writes "listening <addr>" on
// w once it serves (the daemon: "listening <addr> <http addr>", its
// HTTP/JSON API's too), and serves until ctx ends. cmd/breakerbench runs it
// in a child process for each measured server.
func Serve(ctx context.Context, kind, redisAddr string, w io.Writer) error {
	var (
		addr string
		stop func()
		err  error
	)
	switch kind {
	case ServeDaemon:
		var a daemonAddrs
		a, stop, err = serveDaemon(ctx, redisAddr, "", true, tracing.Env{})
		addr = a.grpc + " " + a.http
	case ServeDaemonTraceSome, ServeDaemonTraceAll:
		addr, stop, err = serveTraced(ctx, redisAddr, kind)
	case ServeCeiling:
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
		defer rdb.Close()
		addr, stop, err = startCeiling(rdb)
	case ServeNoop:
		addr, stop, err = startCeiling(nil)
	default:
		return fmt.Errorf("--serve: want daemon, %s, ceiling or noop, got %q", strings.Join(traceKinds, ", "), kind)
	}
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(w, "listening %s\n", addr)
	<-ctx.Done()
	return nil
}

// child is a server running in a child process.
type child struct {
	addr     string
	httpAddr string // the daemon's HTTP/JSON API
	cmd      *exec.Cmd
	stdin    io.Closer
}

// spawn starts exe --serve kind --redis-addr redisAddr (and --cpuprofile
// profile when profile is set) and waits (at most 30 s) for the address it
// serves on.
func spawn(exe, kind, redisAddr, profile string) (*child, error) {
	args := []string{"--serve", kind, "--redis-addr", redisAddr}
	if profile != "" {
		args = append(args, "--cpuprofile", profile)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s server: %w", kind, err)
	}
	c := &child{cmd: cmd, stdin: in}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case l, ok := <-line:
		addrs, found := strings.CutPrefix(l, "listening ")
		if !ok || !found {
			c.stop()
			return nil, fmt.Errorf("%s server: no address (got %q)", kind, l)
		}
		c.addr, c.httpAddr, _ = strings.Cut(addrs, " ")
		return c, nil
	case <-time.After(30 * time.Second):
		c.stop()
		return nil, fmt.Errorf("%s server: not serving after 30s", kind)
	}
}

// stop closes the child's stdin (its signal to stop), waits up to 10 s,
// then kills it.
func (c *child) stop() {
	_ = c.stdin.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// cpu returns the child's user plus system CPU time so far, from
// /proc/<pid>/stat (Linux; in clock ticks of 10 ms).
func (c *child) cpu() (time.Duration, error) {
	return procCPU(c.cmd.Process.Pid)
}

// clockTick is USER_HZ, 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: fields
	// count from after the last ')'. utime and stime are fields 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("/proc stat: no command name")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("/proc stat: too few fields")
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc stat: %w", err)
	}
	return time.Duration(u+st) * clockTick, nil
}
