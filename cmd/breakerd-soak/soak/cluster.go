package soak

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/store"
)

// The Cluster topology: 3 masters and 3 replicas of the run's own
// (scripts/redis-cluster.sh, cluster-node-timeout ClusterNodeTimeout:
// stall.go). Each master is a
// node for the daemons: the breakers on it go to memory when it is away,
// the others keep answering from Redis. Each master has one fault: the
// stall hits the first master by address, chosen at the start (for a
// proxied stall fault it announces the proxy's port, cluster-announce-port,
// before the daemons start, so that every client and its replica reach it
// through the proxy; the cluster bus does not); the master kill hits the
// master of the first breaker not on it (its replica takes over); the
// restart without persistence hits the third, started again at once with
// its cluster config and no data (its replica resynchronises from it,
// empty too).

// clusterPorts is how many ports startCluster takes: 6 client ports and
// their 6 cluster bus ports.
const clusterPorts = 12

// clusterAddrsVar is the line redis-cluster.sh start prints the nodes on.
const clusterAddrsVar = "BREAKERD_TEST_REDIS_CLUSTER_ADDRS="

// cluster is a running Cluster and its faults.
type cluster struct {
	script, dir string
	env         []string
	rdb         *redis.ClusterClient
	// masters is each breaker's master at the start (setMasters); killed
	// is the master the kill hit.
	masters map[string]string
	killed  string
	first   string // the first breaker not on the stalled master: the kill hits its master
	stalled *stallNode
}

// startCluster starts the Cluster on ports (6 client ports, then their
// bus ports).
func startCluster(c Config, ports []int) (*redisSetup, error) {
	cl := &cluster{script: filepath.Join(c.Scripts, "redis-cluster.sh"), dir: filepath.Join(c.Dir, "redis")}
	cl.env = append(os.Environ(), "REDIS_CLUSTER_PORTS="+joinPorts(ports[:6]), "REDIS_CLUSTER_BUS_PORTS="+joinPorts(ports[6:12]),
		"REDIS_CLUSTER_DIR="+cl.dir, "REDIS_CLUSTER_NODE_TIMEOUT="+strconv.FormatInt(ClusterNodeTimeout.Milliseconds(), 10))
	out, err := runScript(cl.script, cl.env, "start")
	if err != nil {
		return nil, fmt.Errorf("%s start: %v\n%s", cl.script, err, out)
	}
	var addrs []string
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), clusterAddrsVar); ok {
			addrs = strings.Split(v, ",")
		}
	}
	if len(addrs) != 6 {
		_, _ = runScript(cl.script, cl.env, "stop")
		return nil, fmt.Errorf("%s start printed no 6 nodes:\n%s", cl.script, out)
	}
	if err := cl.chooseStalled(c.Self, c.StallFault, addrs); err != nil {
		cl.stop()
		return nil, err
	}
	cl.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	return &redisSetup{
		url:     "redis://" + addrs[0] + "?" + url.Values{"addr": addrs[1:]}.Encode(),
		cluster: true,
		rdb:     cl.rdb,
		masters: cl.setMasters,
		nodes:   addrs,
		kill:    cl.kill,
		wipe:    cl.wipe,
		stall:   cl.stall,
		stop:    func() { _ = cl.rdb.Close(); cl.stop() },
	}, nil
}

func (cl *cluster) stop() {
	_, _ = runScript(cl.script, cl.env, "stop")
	if cl.stalled != nil && cl.stalled.proxy != nil {
		cl.stalled.proxy.Close()
	}
}

// chooseStalled picks the master the stall hits, the first by address,
// and for a proxied fault puts a proxy in front of it and waits until
// every node names the proxy's port for it.
func (cl *cluster) chooseStalled(self, fault string, addrs []string) error {
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DialTimeout: time.Second})
	defer rdb.Close()
	var masters []string
	var mu sync.Mutex
	err := rdb.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters = append(masters, m.Options().Addr)
		return nil
	})
	if err != nil || len(masters) == 0 {
		return fmt.Errorf("the cluster's masters: %v", err)
	}
	sort.Strings(masters)
	first := masters[0]
	cl.stalled = &stallNode{fault: fault, addr: first, pid: func() (int, error) { pid, _, err := cl.pidOf(first); return pid, err }}
	if !proxied(fault) {
		return nil
	}
	p, err := startProxy(self, first)
	if err != nil {
		return err
	}
	cl.stalled.proxy, cl.stalled.addr = p, p.Addr()
	port := p.Addr()[strings.LastIndexByte(p.Addr(), ':')+1:]
	rc := redis.NewClient(&redis.Options{Addr: first})
	defer rc.Close()
	if err := rc.ConfigSet(ctx, "cluster-announce-port", port).Err(); err != nil {
		return fmt.Errorf("announce the proxy's port on %s: %w", first, err)
	}
	return waitAnnounced(ctx, addrs, port)
}

// waitAnnounced waits up to 30 s for every node of addrs to name a node
// at port.
func waitAnnounced(ctx context.Context, addrs []string, port string) error {
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(200 * time.Millisecond) {
		seen := 0
		for _, a := range addrs {
			rc := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
			nodes, err := rc.ClusterNodes(ctx).Result()
			_ = rc.Close()
			if err == nil && strings.Contains(nodes, ":"+port+"@") {
				seen++
			}
		}
		if seen == len(addrs) {
			return nil
		}
	}
	return fmt.Errorf("the cluster's nodes did not all name the proxy's port %s within 30s", port)
}

// setMasters reads the master of each breaker's slot.
func (cl *cluster) setMasters(ctx context.Context, names []string) (map[string]string, error) {
	m := map[string]string{}
	for _, n := range names {
		node, err := cl.rdb.MasterForKey(ctx, store.KeysOf(n).State)
		if err != nil {
			return nil, fmt.Errorf("the master of %s: %w", n, err)
		}
		m[n] = node.Options().Addr
	}
	cl.masters = m
	for _, n := range names {
		if m[n] != cl.stalled.addr {
			cl.first = n
			break
		}
	}
	return m, nil
}

// pidOf reads the pid of the node at address a.
func (cl *cluster) pidOf(a string) (int, string, error) {
	pidFile := filepath.Join(cl.dir, a[strings.LastIndexByte(a, ':')+1:], "redis.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, pidFile, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, pidFile, err
}

// role returns the ROLE of the node at a ("master", "slave"), "" when it
// does not answer.
func role(ctx context.Context, a string) string {
	rc := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DialTimeout: time.Second})
	defer rc.Close()
	r, err := rc.Do(ctx, "ROLE").Slice()
	if err != nil || len(r) == 0 {
		return ""
	}
	s, _ := r[0].(string)
	return s
}

// replicaOf returns the address of a replica of the master at a.
func replicaOf(ctx context.Context, a string) (string, error) {
	rc := redis.NewClient(&redis.Options{Addr: a})
	defer rc.Close()
	id, err := rc.ClusterMyID(ctx).Result()
	if err != nil {
		return "", err
	}
	reps, err := rc.Do(ctx, "CLUSTER", "REPLICAS", id).StringSlice()
	if err != nil || len(reps) == 0 {
		return "", fmt.Errorf("CLUSTER REPLICAS %s: %v, %v", id, reps, err)
	}
	// "<id> <ip:port@cport> ...": the address is the second field.
	f := strings.Fields(reps[0])
	if len(f) < 2 {
		return "", fmt.Errorf("CLUSTER REPLICAS %s: %q", id, reps[0])
	}
	return strings.SplitN(f[1], "@", 2)[0], nil
}

// kill SIGKILLs the master of cl.first, waits for its replica to take
// over its slots, resynchronises the observer's log cursors and returns
// what happened in words.
func (cl *cluster) kill(ctx context.Context, obs *Observer, names []string) string {
	a := cl.masters[cl.first]
	rep, err := replicaOf(ctx, a)
	if err != nil {
		obs.Flag("failover", "", "the replica of %s: %v", a, err)
		return "not done: " + err.Error()
	}
	pid, pidFile, err := cl.pidOf(a)
	if err != nil {
		obs.Flag("failover", "", "master pid: %v", err)
		return "not done: " + err.Error()
	}
	killed := time.Now()
	obs.KilledOn(a, killed)
	cl.killed = a
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		obs.Flag("failover", "", "kill master %s: %v", a, err)
		return "not done: " + err.Error()
	}
	_ = os.Remove(pidFile) // so that the script's stop never signals a reused pid
	var promoted time.Time
	for time.Since(killed) < time.Minute {
		if role(ctx, rep) == "master" {
			promoted = time.Now()
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if promoted.IsZero() {
		obs.Flag("failover", "", "the replica %s did not take over within a minute of its master's kill", rep)
		return "the replica was not promoted within a minute"
	}
	// Read from the new master until a read of the dead master's slot
	// succeeds, then the log shows what rolled back.
	key := store.KeysOf(cl.first).State
	for time.Since(promoted) < 30*time.Second {
		cl.rdb.ReloadState(ctx)
		if err := cl.rdb.Exists(ctx, key).Err(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	resync(ctx, cl.rdb, obs, names)
	readLog(ctx, cl.rdb, obs, names)
	obs.Settled(time.Now().Add(5 * time.Second)) // daemons leave memory mode within a second of the takeover
	return fmt.Sprintf("master %s (%d of %d breakers) killed (SIGKILL) at %s; its replica %s took over %s later; the old master stays down",
		a, countOn(cl.masters, a), len(cl.masters), stamp(killed), rep, promoted.Sub(killed).Round(10*time.Millisecond))
}

// wipe SIGKILLs a master the kill did not hit and starts it again at once
// with its cluster config and no data; it returns what happened in words.
func (cl *cluster) wipe(ctx context.Context, obs *Observer) string {
	var a string
	for _, m := range mastersOf(cl.masters) {
		if m != cl.killed && m != cl.stalled.addr && role(ctx, m) == "master" {
			a = m
			break
		}
	}
	if a == "" {
		obs.Flag("restart", "", "no master of the start is still a master")
		return "not done: no master left to restart"
	}
	pid, pidFile, err := cl.pidOf(a)
	if err != nil {
		obs.Flag("restart", "", "master pid: %v", err)
		return "not done: " + err.Error()
	}
	wiped := time.Now()
	obs.WipedOn(a, wiped)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		obs.Flag("restart", "", "kill master %s: %v", a, err)
		return "not done: " + err.Error()
	}
	_ = os.Remove(pidFile)
	for time.Since(wiped) < 5*time.Second && syscall.Kill(pid, 0) == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if out, err := runScript(cl.script, cl.env, "restart-node", a[strings.LastIndexByte(a, ':')+1:]); err != nil {
		obs.Flag("restart", "", "start %s again: %v\n%s", a, err, out)
		return "not done: " + err.Error()
	}
	rc := redis.NewClient(&redis.Options{Addr: a})
	defer rc.Close()
	for time.Since(wiped) < 30*time.Second && rc.Ping(ctx).Err() != nil {
		time.Sleep(50 * time.Millisecond)
	}
	answered := time.Since(wiped)
	n, _ := rc.DBSize(ctx).Result()
	// Wait for the Cluster to serve the restarted master's slots again, so
	// that the logs can be read.
	var key string
	for b, m := range cl.masters {
		if m == a {
			key = store.KeysOf(b).State
			break
		}
	}
	for time.Since(wiped) < 30*time.Second {
		cl.rdb.ReloadState(ctx)
		info, _ := rc.ClusterInfo(ctx).Result()
		if strings.Contains(info, "cluster_state:ok") && cl.rdb.Exists(ctx, key).Err() == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Sprintf("master %s (%d of %d breakers) killed (SIGKILL) at %s and started again without persistence, answering %s later with %d keys as %s",
		a, countOn(cl.masters, a), len(cl.masters), stamp(wiped), answered.Round(10*time.Millisecond), n, role(ctx, a))
}

// stall stalls the master chosen at the start (cl.stalled) for Stall
// (below the node timeout: its replica does not take over) and ends the
// stall; it returns what happened in words.
func (cl *cluster) stall(ctx context.Context, obs *Observer) string {
	a := cl.stalled.addr
	from, to, err := stallFor(obs, a, cl.stalled, Stall)
	if err != nil {
		obs.Flag("stall", "", "%v", err)
		return "not done: " + err.Error()
	}
	if r := role(ctx, a); r != "master" {
		obs.Flag("stall", "", "%s is %q after its stall: a failover, not a stall", a, r)
	}
	return fmt.Sprintf("master %s (%d of %d breakers): %s at %s for %s, still a master after",
		a, countOn(cl.masters, a), len(cl.masters), cl.stalled.what(), stamp(from), to.Sub(from).Round(10*time.Millisecond))
}

// mastersOf returns the distinct masters of m, sorted.
func mastersOf(m map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range m {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	sort.Strings(out)
	return out
}

// countOn counts the breakers of m on master a.
func countOn(m map[string]string, a string) int {
	n := 0
	for _, x := range m {
		if x == a {
			n++
		}
	}
	return n
}

// forEachMaster runs fn on every master of rdb (one client for a single
// Redis or Sentinel's master).
func forEachMaster(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, redis.UniversalClient) error) error {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return fn(ctx, rdb)
	}
	return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return fn(ctx, m) })
}
