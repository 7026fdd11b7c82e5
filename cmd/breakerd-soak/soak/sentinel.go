package soak

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Sentinel topology (the default): a master, a replica and 3
// sentinels of the run's own (scripts/redis-sentinel.sh, down-after
// SentinelDownAfter: stall.go).
// Its master is one node for the daemons: every breaker is on it. For a
// proxied stall fault the sentinels monitor the first master through the
// proxy, so that they name the proxy's address to the daemons, the
// observer and the replica.

// sentinelPorts is how many ports startSentinel takes.
const sentinelPorts = 5

// startSentinel starts the Sentinel setup on ports (master, replica, the
// 3 sentinels).
func startSentinel(c Config, ports []int) (*redisSetup, error) {
	dir := filepath.Join(c.Dir, "redis")
	script := filepath.Join(c.Scripts, "redis-sentinel.sh")
	env := append(os.Environ(), "REDIS_SENTINEL_PORTS="+joinPorts(ports), "REDIS_SENTINEL_DIR="+dir,
		"REDIS_SENTINEL_DOWN_AFTER="+strconv.FormatInt(SentinelDownAfter.Milliseconds(), 10))
	master, replica := ports[0], ports[1]
	var proxy *proxyProc
	if proxied(c.StallFault) {
		p, err := startProxy(c.Self, addr(master))
		if err != nil {
			return nil, err
		}
		proxy = p
		env = append(env, "REDIS_SENTINEL_MONITOR_PORT="+p.Addr()[strings.LastIndexByte(p.Addr(), ':')+1:])
	}
	closeProxy := func() {
		if proxy != nil {
			proxy.Close()
		}
	}
	if out, err := runScript(script, env, "start"); err != nil {
		closeProxy()
		return nil, fmt.Errorf("%s start: %v\n%s", script, err, out)
	}
	sentinels := []string{addr(ports[2]), addr(ports[3]), addr(ports[4])}
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: sentinels,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	return &redisSetup{
		url: fmt.Sprintf("redis://%s/0?master_name=mymaster&addr=%s&addr=%s", sentinels[0], sentinels[1], sentinels[2]),
		rdb: rdb,
		kill: func(ctx context.Context, obs *Observer, names []string) string {
			return killMaster(ctx, obs, rdb, dir, master, replica, sentinels, names)
		},
		wipe: func(ctx context.Context, obs *Observer) string {
			return restartWithoutPersistence(ctx, obs, dir, sentinels)
		},
		stall: func(ctx context.Context, obs *Observer) string {
			return stallMaster(ctx, obs, dir, sentinels, &stallNode{fault: c.StallFault, proxy: proxy})
		},
		stop: func() { _ = rdb.Close(); _, _ = runScript(script, env, "stop"); closeProxy() },
	}, nil
}

// killMaster SIGKILLs the Redis master, waits for Sentinel to promote the
// replica, resynchronises the observer's log cursors and returns what
// happened in words.
func killMaster(ctx context.Context, obs *Observer, rdb redis.UniversalClient, dir string, master, replica int, sentinels []string, names []string) string {
	pidFile := filepath.Join(dir, strconv.Itoa(master), "redis.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		obs.Flag("failover", "", "master pid: %v", err)
		return "not done: " + err.Error()
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	killed := time.Now()
	obs.Killed(killed)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		obs.Flag("failover", "", "kill master: %v", err)
		return "not done: " + err.Error()
	}
	_ = os.Remove(pidFile) // so that the script's stop never signals a reused pid
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinels[0]})
	defer sc.Close()
	var promoted time.Time
	for time.Since(killed) < time.Minute {
		a, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
		if err == nil && len(a) == 2 && a[1] == strconv.Itoa(replica) {
			rc := redis.NewClient(&redis.Options{Addr: addr(replica)})
			role, _ := rc.Do(ctx, "ROLE").Slice()
			_ = rc.Close()
			if len(role) > 0 && role[0] == "master" {
				promoted = time.Now()
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if promoted.IsZero() {
		obs.Flag("failover", "", "Sentinel did not promote the replica within a minute of the master's kill")
		return "the replica was not promoted within a minute"
	}
	// Read the log from the new master until a read succeeds: it shows
	// what rolled back. Then the window closes.
	for time.Since(promoted) < 30*time.Second {
		if rdb.Ping(ctx).Err() == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	resync(ctx, rdb, obs, names)
	readLog(ctx, rdb, obs, names)
	settled := time.Now().Add(5 * time.Second) // daemons leave memory mode within a second of Redis answering
	obs.Settled(settled)
	return fmt.Sprintf("master 127.0.0.1:%d killed (SIGKILL) at %s; Sentinel promoted 127.0.0.1:%d %s later; the old master stays down",
		master, stamp(killed), replica, promoted.Sub(killed).Round(10*time.Millisecond))
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

// stallMaster stalls the current master (n: the fault) for Stall (below
// the down-after: Sentinel keeps it the master) and ends the stall; it
// returns what happened in words.
func stallMaster(ctx context.Context, obs *Observer, dir string, sentinels []string, n *stallNode) string {
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinels[0]})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
	if err != nil || len(a) != 2 {
		obs.Flag("stall", "", "the master's address: %v", err)
		return "not done: no master address"
	}
	n.addr = "127.0.0.1:" + a[1]
	n.pid = func() (int, error) {
		b, err := os.ReadFile(filepath.Join(dir, a[1], "redis.pid"))
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(strings.TrimSpace(string(b)))
	}
	from, to, err := stallFor(obs, "", n, Stall)
	if err != nil {
		obs.Flag("stall", "", "%v", err)
		return "not done: " + err.Error()
	}
	after, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
	if err != nil || len(after) != 2 || after[1] != a[1] {
		obs.Flag("stall", "", "Sentinel named another master after the stall (%v, %v): a failover, not a stall", after, err)
	}
	return fmt.Sprintf("%s at %s for %s, still the master after",
		n.what(), stamp(from), to.Sub(from).Round(10*time.Millisecond))
}
