package failover

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The failover tests are the failover tier (testredis.Tier): they start
// Redis processes of their own and need redis-server (and
// redis-sentinel).
func needRedis(t *testing.T, bins ...string) {
	t.Helper()
	testredis.Tier(t, "failover")
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s names the failover tier but %s is not installed: %v", testredis.EnvTiers, b, err)
		}
	}
}

// freePorts returns n loopback ports nothing listens on, all distinct.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

func join(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, " ")
}

// Starting a script's Redis processes: ports free a moment before may be
// taken by then (another test run picks its ports the same way), and a
// cluster whose ports reach another run's nodes never joins, so a start
// that fails or passes startBound is stopped and tried again on other ports.
const (
	startBound    = 3 * time.Minute
	startAttempts = 4
)

// startScript runs scripts/<name> start with the environment envFor gives
// for n free ports, stops what it started when t ends, and returns the
// output's KEY=value lines, the ports and the environment.
func startScript(t *testing.T, name string, n int, envFor func(ports []int) []string) (vals map[string]string, ports []int, env []string) {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", "..", "..", "scripts", name))
	if err != nil {
		t.Fatal(err)
	}
	run := func(bound time.Duration, env []string, arg string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		cmd := exec.CommandContext(ctx, path, arg)
		cmd.Env = append(os.Environ(), env...)
		cmd.WaitDelay = 5 * time.Second // a daemonized redis-server may hold the output open
		return cmd.CombinedOutput()
	}
	for attempt := 1; ; attempt++ {
		ports = freePorts(t, n)
		env = envFor(ports)
		out, err := run(startBound, env, "start")
		if err == nil {
			t.Cleanup(func() {
				if out, err := run(startBound, env, "stop"); err != nil {
					t.Errorf("%s stop: %v\n%s", name, err, out)
				}
			})
			return keyValues(out), ports, env
		}
		_, _ = run(startBound, env, "stop")
		if attempt == startAttempts {
			t.Fatalf("%s start, attempt %d: %v\n%s", name, attempt, err, out)
		}
		t.Logf("%s start on ports %v: %v; again on others", name, ports, err)
	}
}

// keyValues returns out's KEY=value lines.
func keyValues(out []byte) map[string]string {
	vals := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			vals[k] = v
		}
	}
	return vals
}

// load is 50 workers, half on each daemon, calling Allow and then Record
// in a loop on a few breakers, each request with its own deadline. It
// counts every request and what it got, and, per worker and breaker, any
// generation lower than one the same worker saw before.
type load struct {
	deadline time.Duration

	total, answered, fallback atomic.Int64 // fallback: Unavailable or DeadlineExceeded
	degraded                  atomic.Int64 // answered from a daemon's memory
	maxTook                   atomic.Int64 // ns, logged: it measures the test process's own load (see hangs)
	phase                     atomic.Int64 // bumped by the test between stages
	answeredIn                [8]atomic.Int64

	mu        sync.Mutex
	bad       []string // errors the client's fallback policy does not allow
	backwards []string // a generation lower than one seen before
	maxGen    map[string]int64
}

// run starts the workers; stop ends them and waits.
func (l *load) run(t *testing.T, daemons []*daemontest.Daemon, names []string) (stop func()) {
	t.Helper()
	l.maxGen = map[string]int64{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 50 {
		d := daemons[i%len(daemons)]
		conn, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		api := pb.NewBreakerServiceClient(conn)
		worker := fmt.Sprintf("w%02d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.worker(ctx, api, worker, names, rand.New(rand.NewPCG(uint64(i), 7)))
		}()
	}
	return func() { cancel(); wg.Wait() }
}

func (l *load) worker(ctx context.Context, api pb.BreakerServiceClient, worker string, names []string, r *rand.Rand) {
	seen := map[string]int64{}
	// observe notes a generation Redis answered with; a degraded answer
	// comes from the daemon's in-memory breakers, whose generations are
	// their own, and says nothing of what Redis kept.
	observe := func(name string, st *pb.BreakerState, degraded bool) {
		if degraded {
			l.degraded.Add(1)
			return
		}
		g := st.GetGeneration()
		if g < seen[name] {
			l.mu.Lock()
			l.backwards = append(l.backwards, fmt.Sprintf("%s saw %s at generation %d after %d", worker, name, g, seen[name]))
			l.mu.Unlock()
		}
		seen[name] = max(seen[name], g)
		l.mu.Lock()
		l.maxGen[name] = max(l.maxGen[name], g)
		l.mu.Unlock()
	}
	// call runs one request; it returns false when the test is stopping.
	call := func(method string, do func(ctx context.Context) error) (ok, live bool) {
		cctx, cancel := context.WithTimeout(ctx, l.deadline)
		defer cancel()
		start := time.Now()
		err := do(cctx)
		took := time.Since(start)
		if ctx.Err() != nil {
			return false, false // cut by the end of the test, not counted
		}
		l.total.Add(1)
		for {
			m := l.maxTook.Load()
			if int64(took) <= m || l.maxTook.CompareAndSwap(m, int64(took)) {
				break
			}
		}
		switch status.Code(err) {
		case codes.OK:
			l.answered.Add(1)
			l.answeredIn[l.phase.Load()].Add(1)
			return true, true
		case codes.Unavailable, codes.DeadlineExceeded:
			// The client answers these from its fallback (client.unreachable).
			l.fallback.Add(1)
		default:
			l.mu.Lock()
			l.bad = append(l.bad, fmt.Sprintf("%s %s: %v", worker, method, err))
			l.mu.Unlock()
		}
		return false, true
	}
	for {
		name := names[r.IntN(len(names))]
		var a *pb.AllowResponse
		ok, live := call("Allow", func(ctx context.Context) (err error) {
			a, err = api.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: worker})
			return err
		})
		if !live {
			return
		}
		if !ok {
			continue
		}
		observe(name, a.GetState(), a.GetDegraded())
		if a.GetDecision() != pb.Decision_DECISION_ALLOWED && a.GetDecision() != pb.Decision_DECISION_PROBE {
			continue
		}
		outcome := pb.Outcome_OUTCOME_SUCCESS
		if r.IntN(2) == 0 {
			outcome = pb.Outcome_OUTCOME_TIMEOUT
		}
		var rec *pb.RecordResponse
		ok, live = call("Record", func(ctx context.Context) (err error) {
			rec, err = api.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: worker, Ticket: a.GetTicket(), Outcome: outcome, LatencyMs: 100})
			return err
		})
		if !live {
			return
		}
		if ok {
			observe(name, rec.GetState(), rec.GetDegraded())
		}
	}
}

// check fails t for every request that got an error the fallback policy
// does not allow and for a stage with no answer, and logs the counts.
// Whether a handler hung past its deadline is hangs's to judge.
func (l *load) check(t *testing.T, what string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("%s: %d requests: %d answered (%d of them degraded, from a daemon's memory), %d fell back (Unavailable or DeadlineExceeded), %d other errors; slowest %s (deadline %s); answered per stage %v",
		what, l.total.Load(), l.answered.Load(), l.degraded.Load(), l.fallback.Load(), len(l.bad), time.Duration(l.maxTook.Load()).Round(time.Millisecond), l.deadline, l.stages())
	if n := l.total.Load(); n != l.answered.Load()+l.fallback.Load()+int64(len(l.bad)) {
		t.Errorf("%d requests, but %d answered + %d fell back + %d errors", n, l.answered.Load(), l.fallback.Load(), len(l.bad))
	}
	for i, e := range l.bad {
		if i == 10 {
			t.Errorf("... and %d more", len(l.bad)-10)
			break
		}
		t.Errorf("an error the fallback policy does not allow: %s", e)
	}
	for i := int64(0); i <= l.phase.Load(); i++ {
		if l.answeredIn[i].Load() == 0 {
			t.Errorf("stage %d: no request was answered", i)
		}
	}
}

func (l *load) stages() []int64 {
	var out []int64
	for i := int64(0); i <= l.phase.Load(); i++ {
		out = append(out, l.answeredIn[i].Load())
	}
	return out
}

// next starts the next stage and waits until it has answers (the daemons
// serve again), bounded by the test's deadline.
func (l *load) next(t *testing.T, what string, answers int64) {
	t.Helper()
	p := l.phase.Add(1)
	daemontest.Eventually(t, what, func() bool { return l.answeredIn[p].Load() >= answers })
}

// backwardsCount returns how many observations went backwards so far.
func (l *load) backwardsCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.backwards)
}

// moveClock advances the daemons' pinned script clock 5 times faster than
// the wall clock, so that cooldowns pass and breakers keep transitioning
// (generations keep growing) while the test runs. Not faster: a breaker
// whose verdict is older than its retention (15.5 min by default) on that
// clock reads as never tripped, generation 0, which is not a loss.
func moveClock(b *testredis.Backend) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				b.Advance(50 * time.Millisecond)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func role(ctx context.Context, addr string) string {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	r, err := c.Do(ctx, "ROLE").Slice()
	if err != nil || len(r) == 0 {
		return "down"
	}
	s, _ := r[0].(string)
	return s
}

func clusterOK(ctx context.Context, addrs []string) bool {
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		info, err := c.ClusterInfo(ctx).Result()
		_ = c.Close()
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			return false
		}
	}
	return true
}

// masterAndReplica returns the address of the master serving key's slot
// and of one of its replicas.
func masterAndReplica(t *testing.T, b *testredis.Backend, key string) (master, replica string) {
	t.Helper()
	ctx := context.Background()
	cc := b.Client.(*redis.ClusterClient)
	cc.ReloadState(ctx)
	m, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	master = m.Options().Addr
	id, err := m.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	reps, err := m.Do(ctx, "CLUSTER", "REPLICAS", id).StringSlice()
	if err != nil || len(reps) == 0 {
		t.Fatalf("CLUSTER REPLICAS %s = %v, %v", id, reps, err)
	}
	f := strings.Fields(reps[0])
	replica, _, _ = strings.Cut(f[1], "@")
	return master, replica
}

// startDaemons starts the two daemons, their handlers watched by h.
func startDaemons(t *testing.T, b *testredis.Backend, h *hangs) []*daemontest.Daemon {
	t.Helper()
	o := daemontest.Options{Server: []grpc.ServerOption{h.option()}}
	return []*daemontest.Daemon{daemontest.StartWith(t, b, o), daemontest.StartWith(t, b, o)}
}

func breakers(b *testredis.Backend) []string {
	var names []string
	for i := range 20 {
		names = append(names, b.Breaker(fmt.Sprintf("tool-%02d", i)))
	}
	return names
}

// TestClusterFailoverUnderLoad: 2 daemons and 50 workers on a 3+3 Redis
// Cluster of the test's own. A coordinated CLUSTER FAILOVER loses nothing:
// no worker ever sees a breaker's generation go back. Then a master is
// killed (SIGKILL): Redis's asynchronous replication may lose acknowledged
// writes; the test counts what was lost (as generations that went back)
// and logs it. Throughout, every request is answered or gets an error the
// client's fallback policy answers (Unavailable, DeadlineExceeded), no
// handler runs on after its context ended (hangs), and the scripts run on each new master (EVALSHA
// falls back to EVAL there) without an error anyone sees.
func TestClusterFailoverUnderLoad(t *testing.T) {
	needRedis(t, "redis-server", "redis-cli")
	var dir string
	vals, _, _ := startScript(t, "redis-cluster.sh", 12, func(ports []int) []string {
		dir = t.TempDir()
		return []string{"REDIS_CLUSTER_PORTS=" + join(ports[:6]), "REDIS_CLUSTER_BUS_PORTS=" + join(ports[6:]),
			"REDIS_CLUSTER_DIR=" + dir, "REDIS_CLUSTER_NODE_TIMEOUT=1000"}
	})
	addrs := strings.Split(vals[testredis.EnvClusterAddrs], ",")
	if len(addrs) != 6 {
		t.Fatalf("redis-cluster.sh printed %v", vals)
	}
	b := testredis.ClusterAt(t, addrs)
	stopClock := moveClock(b)
	defer stopClock()
	h := newHangs()
	daemons := startDaemons(t, b, h)
	names := breakers(b)
	l := &load{deadline: 2 * time.Second}
	stop := l.run(t, daemons, names)
	defer stop()
	ctx := context.Background()
	daemontest.Eventually(t, "the load to be answered", func() bool { return l.answeredIn[0].Load() >= 2000 })

	// Coordinated: the replica takes over once it has every write.
	key := store.KeysOf(names[0]).State
	master, replica := masterAndReplica(t, b, key)
	rc := redis.NewClient(&redis.Options{Addr: replica})
	defer rc.Close()
	if err := rc.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatalf("CLUSTER FAILOVER on %s: %v", replica, err)
	}
	daemontest.Eventually(t, "the replica "+replica+" to be master", func() bool {
		return role(ctx, replica) == "master" && role(ctx, master) == "slave" && clusterOK(ctx, addrs)
	})
	l.next(t, "answers after the coordinated failover", 2000)
	if n := l.backwardsCount(); n != 0 {
		l.mu.Lock()
		t.Errorf("after a coordinated failover %d observations went back, want none: %v", n, l.backwards[:min(n, 5)])
		l.mu.Unlock()
	}
	before := map[string]int64{}
	l.mu.Lock()
	for k, v := range l.maxGen {
		before[k] = v
	}
	l.mu.Unlock()
	// Generations only grow: what every worker saw before, Redis still has.
	states, err := daemons[0].Store.BatchGet(ctx, names)
	if err != nil {
		t.Fatalf("BatchGet after the coordinated failover: %v", err)
	}
	grew := 0
	for _, st := range states {
		if st.GetGeneration() < before[st.GetBreaker()] {
			t.Errorf("%s: generation %d after the failover, but a worker saw %d", st.GetBreaker(), st.GetGeneration(), before[st.GetBreaker()])
		}
		if st.GetGeneration() > 0 {
			grew++
		}
	}
	if grew == 0 {
		t.Errorf("no breaker ever transitioned: the load did not exercise generations")
	}

	// Killed: the new master (the old replica) dies without a word; the old
	// master, its replica now, takes over.
	master, replica = replica, master
	port := master[strings.LastIndexByte(master, ':')+1:]
	pid, err := os.ReadFile(filepath.Join(dir, port, "redis.pid"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil {
		t.Fatal(err)
	}
	lostBefore := l.backwardsCount()
	if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
		t.Fatalf("kill master %s (pid %d): %v", master, p, err)
	}
	// Its pid file outlives it: remove it, so that the script's stop never
	// signals whatever process gets that pid next.
	_ = os.Remove(filepath.Join(dir, port, "redis.pid"))
	var live []string
	for _, a := range addrs {
		if a != master {
			live = append(live, a)
		}
	}
	daemontest.Eventually(t, "the replica "+replica+" to take over from the killed master", func() bool {
		return role(ctx, replica) == "master" && clusterOK(ctx, live)
	})
	l.next(t, "answers after the killed master", 2000)
	stop()
	l.check(t, "cluster failover")
	h.check(t, "cluster failover")
	lost := l.backwardsCount() - lostBefore
	t.Logf("after the killed master: %d observations went back (acknowledged transitions lost to asynchronous replication)", lost)
}

// TestSentinelFailoverUnderLoad: the same load through Sentinel (a master,
// a replica, 3 sentinels of the test's own) while SENTINEL FAILOVER
// promotes the replica. Every request is answered or falls back, no
// handler runs on after its context ended (hangs), and the daemons follow the new master.
func TestSentinelFailoverUnderLoad(t *testing.T) {
	needRedis(t, "redis-server", "redis-sentinel", "redis-cli")
	vals, ports, _ := startScript(t, "redis-sentinel.sh", 5, func(ports []int) []string {
		return []string{"REDIS_SENTINEL_PORTS=" + join(ports), "REDIS_SENTINEL_DIR=" + t.TempDir()}
	})
	if vals["BREAKERD_REDIS_URL"] == "" {
		t.Fatalf("redis-sentinel.sh printed %v", vals)
	}
	var sentinels []string
	for _, p := range ports[2:] {
		sentinels = append(sentinels, fmt.Sprintf("127.0.0.1:%d", p))
	}
	b := testredis.SentinelAt(t, "mymaster", sentinels)
	stopClock := moveClock(b)
	defer stopClock()
	h := newHangs()
	daemons := startDaemons(t, b, h)
	l := &load{deadline: 2 * time.Second}
	stop := l.run(t, daemons, breakers(b))
	defer stop()
	ctx := context.Background()
	daemontest.Eventually(t, "the load to be answered", func() bool { return l.answeredIn[0].Load() >= 2000 })

	master, replica := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinels[0]})
	defer sc.Close()
	if err := sc.Failover(ctx, "mymaster").Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	daemontest.Eventually(t, "the replica to be master", func() bool {
		a, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
		return err == nil && len(a) == 2 && a[0]+":"+a[1] == replica && role(ctx, replica) == "master" && role(ctx, master) == "slave"
	})
	before := l.backwardsCount()
	l.next(t, "answers after the Sentinel failover", 2000)
	stop()
	l.check(t, "sentinel failover")
	h.check(t, "sentinel failover")
	t.Logf("after SENTINEL FAILOVER: %d observations went back in all (%d before it)", l.backwardsCount(), before)
}

// TestMain quiets go-redis's own log: while a master is down every pool
// logs each failed dial, and the test counts those failures itself.
func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	os.Exit(m.Run())
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
