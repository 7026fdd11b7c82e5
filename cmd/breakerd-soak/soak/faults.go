package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// The faults beyond the master's kill (Run schedules them by Config's
// fractions of the run): a daemon killed and started again, and the
// Redis master restarted without persistence (every key gone).

// faultClock fires the daemon kill (and the daemon's start 3 s later) and
// the restart without persistence at their times.
type faultClock struct {
	c                       Config
	killAt, startAt, wipeAt time.Time
	killed, started, wiped  bool
}

func newFaultClock(c Config, start time.Time) *faultClock {
	at := func(f float64) time.Time { return start.Add(time.Duration(float64(c.Duration) * f)) }
	return &faultClock{c: c, killAt: at(c.DaemonKillAt), startAt: at(c.DaemonKillAt).Add(3 * time.Second), wipeAt: at(c.RestartAt),
		killed: c.DaemonKillAt < 0, started: c.DaemonKillAt < 0, wiped: c.RestartAt < 0}
}

// step fires what is due at now; wipe runs the restart without
// persistence.
func (f *faultClock) step(ctx context.Context, now time.Time, rep *Report, obs *Observer, daemons []*daemonProc, wipe func()) {
	d := daemons[len(daemons)-1]
	switch {
	case !f.killed && now.After(f.killAt):
		f.killed = true
		killDaemon(d)
		rep.DaemonKill = fmt.Sprintf("daemon %s killed (SIGKILL) at %s", d.addr, stamp(now))
	case f.killed && !f.started && now.After(f.startAt):
		f.started = true
		i := len(daemons) - 1
		nd, err := startDaemon(f.c, i, d.addr, d.metrics, d.redisURL, d.policyFile)
		if err == nil {
			err = nd.waitServing(ctx)
		}
		if err != nil {
			obs.Flag("daemon-kill", "", "start daemon %s again: %v", d.addr, err)
			return
		}
		daemons[i] = nd
		rep.DaemonKill += fmt.Sprintf("; started again at %s, serving at %s", stamp(now), stamp(time.Now()))
	case !f.wiped && now.After(f.wipeAt):
		f.wiped = true
		wipe()
	}
}

// redisFaults counts the Redis faults the run injected (failedOver: the
// master's kill happened).
func (f *faultClock) redisFaults(failedOver bool) int {
	n := 0
	if failedOver {
		n++
	}
	if f.wiped && f.c.RestartAt >= 0 {
		n++
	}
	return n
}

// killDaemon SIGKILLs daemon d (no drain: its in-flight calls and leases
// die with it) and returns when it is gone.
func killDaemon(d *daemonProc) {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	_ = d.cmd.Wait()
	_ = d.log.Close()
}

// restartWithoutPersistence SIGKILLs the current master (as Sentinel names
// it) and starts it again at once on its port, empty: no RDB, no AOF, as
// scripts/redis-sentinel.sh starts it. It returns what happened in words.
func restartWithoutPersistence(ctx context.Context, obs *Observer, dir string, sentinels []string) string {
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinels[0]})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
	if err != nil || len(a) != 2 {
		obs.Flag("restart", "", "the master's address: %v", err)
		return "not done: no master address"
	}
	port := a[1]
	pidFile := filepath.Join(dir, port, "redis.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		obs.Flag("restart", "", "master pid: %v", err)
		return "not done: " + err.Error()
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	wiped := time.Now()
	obs.Wiped(wiped)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		obs.Flag("restart", "", "kill master: %v", err)
		return "not done: " + err.Error()
	}
	_ = os.Remove(pidFile)
	for time.Since(wiped) < 5*time.Second && syscall.Kill(pid, 0) == nil {
		time.Sleep(20 * time.Millisecond)
	}
	_ = os.Remove(filepath.Join(dir, port, "dump.rdb"))
	out, err := runRedis(filepath.Join(dir, port), port)
	if err != nil {
		obs.Flag("restart", "", "start redis-server again on %s: %v\n%s", port, err, out)
		return "not done: " + err.Error()
	}
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port})
	defer rc.Close()
	for time.Since(wiped) < 30*time.Second && rc.Ping(ctx).Err() != nil {
		time.Sleep(50 * time.Millisecond)
	}
	n, _ := rc.DBSize(ctx).Result()
	return fmt.Sprintf("master 127.0.0.1:%s killed (SIGKILL) at %s and started again without persistence, answering %s later with %d keys",
		port, stamp(wiped), time.Since(wiped).Round(10*time.Millisecond), n)
}

// runRedis starts redis-server on port in dir as scripts/redis-sentinel.sh
// does: no RDB, no AOF.
func runRedis(dir, port string) ([]byte, error) {
	return runCmd("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
		"--pidfile", filepath.Join(dir, "redis.pid"), "--logfile", filepath.Join(dir, "redis.log"), "--daemonize", "yes")
}

// DaemonLog is what the daemons' logs said about Redis: the outage flips
// per daemon log and node (a line each time a node went to memory), and
// when a daemon logged a breaker's state lost, by breaker.
type DaemonLog struct {
	Flips  map[string]int // "<log file> node <node>" -> flips to memory
	Losses map[string][]time.Time
}

// LossMarker begins a daemon's log message when it finds Redis has lost
// a breaker's state (the line names the breaker).
const LossMarker = "redis lost a breaker's state"

// readDaemonLogs reads the daemons' JSON logs in dir (daemon-*.log).
func readDaemonLogs(dir string) DaemonLog {
	out := DaemonLog{Flips: map[string]int{}, Losses: map[string][]time.Time{}}
	files, _ := filepath.Glob(filepath.Join(dir, "daemon-*.log"))
	sort.Strings(files)
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var rec struct {
				Time    time.Time `json:"time"`
				Level   string    `json:"level"`
				Msg     string    `json:"msg"`
				Node    string    `json:"node"`
				Breaker string    `json:"breaker"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				continue
			}
			if strings.HasPrefix(rec.Msg, "redis unreachable: answering") {
				out.Flips[filepath.Base(f)+" node "+rec.Node]++
			}
			if strings.HasPrefix(rec.Msg, LossMarker) {
				out.Losses[rec.Breaker] = append(out.Losses[rec.Breaker], rec.Time)
			}
		}
		_ = fh.Close()
	}
	return out
}

func runCmd(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}
