package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server process the bench started on a free
// loopback port, with no persistence; stop kills it.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
	dir  string
}

// startRedis runs binary (redis-server) on a free loopback port and waits
// until it answers PING, for at most 10 s. Extra are redis.conf directives
// given as flags ("--stream-node-max-bytes", "512").
func startRedis(ctx context.Context, binary string, extra ...string) (*redisServer, error) {
	path, err := exec.LookPath(binary)
	if err != nil {
		return nil, fmt.Errorf("--redis-server: %w (install redis-server, or give --redis-addr)", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "breakerbench-redis-")
	if err != nil {
		return nil, err
	}
	args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", dir, "--protected-mode", "yes"}, extra...)
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, dir: dir}
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer: %w", s.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// benchRedis is the Redis a run uses, with the run's own connection to
// it (for INFO).
type benchRedis struct {
	rdb     *redis.Client
	addr    string
	version string
	owned   bool // started by the run: nobody else's commands are counted
}

// useRedis connects to the Redis at addr or, when addr is empty, starts
// server on a free loopback port; what is to stop at the end is appended
// to closers.
func useRedis(ctx context.Context, addr, server string, closers *[]func()) (benchRedis, error) {
	r := benchRedis{addr: addr, owned: addr == ""}
	if r.owned {
		s, err := startRedis(ctx, server)
		if err != nil {
			return r, err
		}
		*closers = append(*closers, s.stop)
		r.addr = s.addr
	}
	r.rdb = redis.NewClient(&redis.Options{Addr: r.addr})
	*closers = append(*closers, func() { _ = r.rdb.Close() })
	v, err := redisVersion(ctx, r.rdb)
	r.version = v
	return r, err
}

func (s *redisServer) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	_ = os.RemoveAll(s.dir)
}

// freePort returns a loopback TCP port nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// commandCalls returns the calls of every command in INFO commandstats,
// commands run inside Lua scripts included, less the INFO commands the
// bench itself sends to read them.
func commandCalls(ctx context.Context, rdb *redis.Client) (int64, map[string]int64, error) {
	s, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	by := map[string]int64{}
	var total int64
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		// cmdstat_evalsha:calls=12,usec=34,...
		name, rest, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, nil, fmt.Errorf("INFO commandstats: bad calls in %q", sc.Text())
		}
		if name == "info" {
			continue
		}
		by[name] = n
		total += n
	}
	return total, by, nil
}

// redisCPU is the CPU time Redis has spent, user and system, all its
// threads (INFO cpu's used_cpu_user and used_cpu_sys).
func redisCPU(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	s, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO cpu: %w", err)
	}
	var total float64
	found := 0
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		name, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || (name != "used_cpu_user" && name != "used_cpu_sys") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: bad %s in %q", name, sc.Text())
		}
		total += f
		found++
	}
	if found != 2 {
		return 0, errors.New("INFO cpu: no used_cpu_user and used_cpu_sys")
	}
	return time.Duration(total * float64(time.Second)), nil
}

// scriptRuns is the script runs among commandCalls' counts by command.
func scriptRuns(by map[string]int64) int64 {
	return by["evalsha"] + by["eval"] + by["evalsha_ro"] + by["eval_ro"]
}

// usedMemory returns INFO memory's used_memory, in bytes.
func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	s, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO memory: %w", err)
	}
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("INFO memory: no used_memory")
}

// wireProxy forwards loopback TCP to a Redis and counts the requests
// carrying a script (EVALSHA, or EVAL after NOSCRIPT) reaching it: each
// such read from a client is one decision's round trip, which holds for a
// client that waits for each reply (go-redis writes a command or a
// pipeline in one flush). Reads with no script (a daemon's background
// writes, such as its savings tally each second, which a busy host's
// slower pass holds more of) are not a decision's cost. It is used only
// in the sequential wire passes, never in the timed runs, since it adds a
// hop.
type wireProxy struct {
	ln     net.Listener
	target string
	reads  atomic.Int64
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func newWireProxy(target string) (*wireProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &wireProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *wireProxy) addr() string { return p.ln.Addr().String() }

func (p *wireProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.pipe(c, up, true)
		go p.pipe(up, c, false)
	}
}

func (p *wireProxy) pipe(from, to net.Conn, count bool) {
	buf := make([]byte, 64<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			if count && carriesScript(buf[:n]) {
				p.reads.Add(1)
			}
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = to.Close()
			return
		}
	}
}

// carriesScript reports whether a client's request b runs a script: a
// RESP array naming EVALSHA or EVAL (go-redis sends them lower-case).
func carriesScript(b []byte) bool {
	for _, name := range scriptCommands {
		if bytes.Contains(b, name) {
			return true
		}
	}
	return false
}

var scriptCommands = [][]byte{[]byte("\r\nevalsha\r\n"), []byte("\r\neval\r\n"), []byte("\r\nEVALSHA\r\n"), []byte("\r\nEVAL\r\n")}

func (p *wireProxy) close() {
	_ = p.ln.Close()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}
