package soak

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/breakerd/breakerd/internal/daemon"
)

// The faults (Run schedules them by Config's fractions of the run): a
// daemon killed and started again, a Redis master that stalls (SIGSTOP,
// then SIGCONT: stall.go has the rules), a Redis master killed (its
// replica takes over), and a Redis master restarted without persistence
// (every key it held gone). What each topology stalls and kills is in
// sentinel.go and cluster.go.

// faultClock fires the daemon kill (and the daemon's start 3 s later),
// the stall, the master's kill and the restart without persistence at
// their times.
type faultClock struct {
	c                                          Config
	killAt, startAt, stallAt, masterAt, wipeAt time.Time
	killed, started, stalled, mastered, wiped  bool
}

func newFaultClock(c Config, start time.Time) *faultClock {
	at := func(f float64) time.Time { return start.Add(time.Duration(float64(c.Duration) * f)) }
	return &faultClock{c: c, killAt: at(c.DaemonKillAt), startAt: at(c.DaemonKillAt).Add(3 * time.Second),
		stallAt: at(c.StallAt), masterAt: at(c.FailoverAt), wipeAt: at(c.RestartAt),
		killed: c.DaemonKillAt < 0, started: c.DaemonKillAt < 0, stalled: c.StallAt < 0, mastered: c.FailoverAt < 0, wiped: c.RestartAt < 0}
}

// step fires what is due at now.
func (f *faultClock) step(ctx context.Context, now time.Time, r *soakRun) {
	d := r.daemons[len(r.daemons)-1]
	switch {
	case !f.killed && now.After(f.killAt):
		f.killed = true
		killDaemon(d)
		r.rep.DaemonKill = fmt.Sprintf("daemon %s killed (SIGKILL) at %s", d.addr, stamp(now))
	case f.killed && !f.started && now.After(f.startAt):
		f.started = true
		i := len(r.daemons) - 1
		nd, err := startDaemon(f.c, i, d.addr, d.metrics, r.redis, d.policyFile)
		if err == nil {
			err = nd.waitServing(ctx)
		}
		if err != nil {
			r.obs.Flag("daemon-kill", "", "start daemon %s again: %v", d.addr, err)
			return
		}
		r.daemons[i] = nd
		r.rep.DaemonKill += fmt.Sprintf("; started again at %s, serving at %s", stamp(now), stamp(time.Now()))
		// A daemon knows a pin from its event feed only (what it answers
		// from memory is seeded from it): force the breakers open again,
		// so that the daemon started after the first Force knows them.
		if err := r.force(ctx); err != nil {
			r.obs.Flag("forced-open", "", "force again after the daemon's start: %v", err)
		}
	case !f.stalled && now.After(f.stallAt):
		f.stalled = true
		r.rep.Stall = r.redis.stall(ctx, r.obs)
	case !f.mastered && now.After(f.masterAt):
		f.mastered = true
		r.rep.Failover = r.redis.kill(ctx, r.obs, r.names)
	case !f.wiped && now.After(f.wipeAt):
		f.wiped = true
		r.rep.Restart = r.redis.wipe(ctx, r.obs)
		resync(ctx, r.redis.rdb, r.obs, r.names)
		readLog(ctx, r.redis.rdb, r.obs, r.names)
	}
}

// killedNear reports whether the killed daemon was down or starting
// again (from its kill to 3 s after its start) during a stall beginning
// at t.
func (f *faultClock) killedNear(t time.Time) bool {
	return f.c.DaemonKillAt >= 0 && t.After(f.killAt.Add(-Stall-StallSettle)) && t.Before(f.startAt.Add(3*time.Second))
}

// killDaemon SIGKILLs daemon d (no drain: its in-flight calls and leases
// die with it) and returns when it is gone.
func killDaemon(d *daemonProc) {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	_ = d.cmd.Wait()
	_ = d.log.Close()
}

// DaemonLog is what the daemons' logs said about Redis: the outage flips
// per daemon log and node (a line each time a node went to memory), and
// when a daemon logged a breaker's state lost, by breaker.
type DaemonLog struct {
	Flips     map[FlipKey]int // flips to memory per daemon log and node
	FlipTimes map[FlipKey][]time.Time
	// BackTimes is when each daemon log said a node answered again.
	BackTimes map[FlipKey][]time.Time
	// FlipLines is each flip to memory in words, in log order: the log,
	// the node, when, and the error the daemon said began it.
	FlipLines []string
	Losses    map[string][]time.Time
}

// readDaemonLogs reads the daemons' JSON logs in dir (daemon-*.log).
func readDaemonLogs(dir string) DaemonLog {
	out := DaemonLog{Flips: map[FlipKey]int{}, FlipTimes: map[FlipKey][]time.Time{}, BackTimes: map[FlipKey][]time.Time{}, Losses: map[string][]time.Time{}}
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
				Err     string    `json:"err"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				continue
			}
			k := FlipKey{Log: filepath.Base(f), Node: rec.Node}
			if strings.HasPrefix(rec.Msg, daemon.LogAnswersAgain) {
				out.BackTimes[k] = append(out.BackTimes[k], rec.Time)
			}
			if strings.HasPrefix(rec.Msg, daemon.LogToMemory) {
				out.Flips[k]++
				out.FlipTimes[k] = append(out.FlipTimes[k], rec.Time)
				out.FlipLines = append(out.FlipLines, fmt.Sprintf("%s %s at %s: %s", k.Log, cmp.Or(k.Node, "redis"), stamp(rec.Time), rec.Err))
			}
			if strings.HasPrefix(rec.Msg, daemon.LogStateLost) {
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
