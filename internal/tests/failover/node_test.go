package failover

import (
	"context"
	"fmt"
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

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// flips records each node's outage flips (OnOutage) in order.
type flips struct {
	mu sync.Mutex
	by map[string][]bool
}

func (f *flips) add(node string, down bool, _ error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.by[node] = append(f.by[node], down)
}

func (f *flips) of(node string) []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bool(nil), f.by[node]...)
}

func (f *flips) all() map[string][]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]bool{}
	for k, v := range f.by {
		out[k] = append([]bool(nil), v...)
	}
	return out
}

// nodeFixture is a daemon's store on a 3+3 Redis Cluster of the test's
// own, with 30 breakers spread over the three masters; dead is the master
// of the first breaker, the one a test faults.
type nodeFixture struct {
	dir      string
	env      []string
	addrs    []string
	rdb      *redis.ClusterClient
	st       *store.Store
	flips    *flips
	names    []string
	masterOf map[string]string
	dead     string
}

func newNodeFixture(t *testing.T, env ...string) *nodeFixture {
	t.Helper()
	needRedis(t, "redis-server", "redis-cli")
	fx := &nodeFixture{flips: &flips{by: map[string][]bool{}}, masterOf: map[string]string{}}
	vals, _, _ := startScript(t, "redis-cluster.sh", 12, func(ports []int) []string {
		fx.dir = t.TempDir()
		fx.env = append([]string{"REDIS_CLUSTER_PORTS=" + join(ports[:6]), "REDIS_CLUSTER_BUS_PORTS=" + join(ports[6:]),
			"REDIS_CLUSTER_DIR=" + fx.dir}, env...)
		return fx.env
	})
	fx.addrs = strings.Split(vals[testredis.EnvClusterAddrs], ",")
	if len(fx.addrs) != 6 {
		t.Fatalf("redis-cluster.sh printed %v", vals)
	}
	b := testredis.ClusterAt(t, fx.addrs)
	ctx := context.Background()
	// The daemon's retries (internal/daemon connect): one retry, one dial.
	fx.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: fx.addrs, MaxRetries: 1, DialerRetries: 1})
	t.Cleanup(func() { _ = fx.rdb.Close() })
	fx.st = store.New(fx.rdb, store.Options{Now: b.Clock(), Channel: b.Prefix + "events", OnOutage: fx.flips.add})
	t.Cleanup(fx.st.Close)
	if err := fx.st.Load(ctx); err != nil {
		t.Fatal(err)
	}
	byMaster := map[string]int{}
	for i := range 30 {
		n := b.Breaker(fmt.Sprintf("node-%02d", i))
		m, err := fx.rdb.MasterForKey(ctx, store.KeysOf(n).State)
		if err != nil {
			t.Fatal(err)
		}
		fx.names = append(fx.names, n)
		fx.masterOf[n] = m.Options().Addr
		byMaster[m.Options().Addr]++
	}
	if len(byMaster) != 3 {
		t.Fatalf("30 breakers on %d masters (%v), want all 3", len(byMaster), byMaster)
	}
	fx.dead = fx.masterOf[fx.names[0]]
	return fx
}

// kill SIGKILLs the dead master and returns its pid.
func (fx *nodeFixture) kill(t *testing.T) int {
	t.Helper()
	port := fx.dead[strings.LastIndexByte(fx.dead, ':')+1:]
	pidFile := filepath.Join(fx.dir, port, "redis.pid")
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
		t.Fatalf("kill master %s (pid %d): %v", fx.dead, p, err)
	}
	_ = os.Remove(pidFile) // so that the script's stop never signals a reused pid
	return p
}

// others returns the nodes but the dead master.
func (fx *nodeFixture) others() []string {
	var out []string
	for _, a := range fx.addrs {
		if a != fx.dead {
			out = append(out, a)
		}
	}
	return out
}

// checkOnlyDeadFlipped fails the test unless the dead master flipped
// exactly once down and once back, and no other node flipped.
func (fx *nodeFixture) checkOnlyDeadFlipped(t *testing.T) {
	t.Helper()
	if fl := fx.flips.of(fx.dead); len(fl) != 2 || !fl[0] || fl[1] {
		t.Errorf("the faulted master %s flipped %v, want [true false]: once down, once back", fx.dead, fl)
	}
	for node, fl := range fx.flips.all() {
		if node != fx.dead {
			t.Errorf("node %q flipped %v, want no flip: only the faulted master %s is out", node, fl, fx.dead)
		}
	}
	if fx.st.Degraded() {
		t.Errorf("Degraded() = true after the master's breakers answer from Redis again, want false")
	}
}

// TestClusterDeadMasterOutageIsPerNode: under load from 16 workers on the
// fixture's 30 breakers, one master is killed (SIGKILL) and its replica
// takes over. The outage is judged per node: the dead master goes down
// once and comes back once (when its replica serves its slots), the live
// masters never flip, and no answer for a breaker on a live master is
// degraded; the dead master's breakers answer from memory meanwhile, then
// from Redis again.
func TestClusterDeadMasterOutageIsPerNode(t *testing.T) {
	fx := newNodeFixture(t, "REDIS_CLUSTER_NODE_TIMEOUT=1000")
	ctx := context.Background()
	nl := &nodeLoad{st: fx.st, dead: fx.dead, masterOf: fx.masterOf}
	stop := nl.run(fx.names, 16)
	defer stop()
	daemontest.Eventually(t, "the load to be answered", func() bool { return nl.answered.Load() >= 500 })
	fx.kill(t)
	daemontest.Eventually(t, "calls for the dead master's breakers to be answered from memory", func() bool {
		return nl.deadDegraded.Load() >= 50
	})
	daemontest.Eventually(t, "a replica to take over from the killed master "+fx.dead, func() bool { return clusterOK(ctx, fx.others()) })
	// Its breakers answer from Redis again, through the promoted replica.
	after := nl.deadFromRedis.Load()
	daemontest.Eventually(t, "the dead master's breakers to answer from Redis again", func() bool {
		return nl.deadFromRedis.Load() >= after+200
	})
	liveAfter := nl.liveAnswered.Load()
	daemontest.Eventually(t, "more answers for the live masters' breakers", func() bool {
		return nl.liveAnswered.Load() >= liveAfter+200
	})
	stop()
	nl.log(t, fx.flips)
	if n := nl.liveDegraded.Load(); n != 0 {
		t.Errorf("%d answers for breakers on live masters were degraded, want 0: a dead master sent them to memory", n)
	}
	// The dead master's outage ends once the poll sees that it serves no
	// slot any more (its breakers may answer from the new master first).
	daemontest.Eventually(t, "the dead master's outage to end", func() bool {
		fl := fx.flips.of(fx.dead)
		return len(fl) >= 2 && !fl[len(fl)-1]
	})
	fx.checkOnlyDeadFlipped(t)
}

// TestClusterRestartedMasterComesBackOnce: under load, one master is
// killed and started again at once without persistence
// (scripts/redis-cluster.sh restart-node), before its replica could take
// over. A restarted Cluster master answers PING at once but refuses
// every command with a key (CLUSTERDOWN) for about two seconds while it
// rejoins: its breakers go to memory once and come back once, when the
// Cluster serves them again, not on the first PINGs (whose calls would
// fail again and send them back to memory); no other node flips and no
// answer for a breaker on another master is degraded.
func TestClusterRestartedMasterComesBackOnce(t *testing.T) {
	fx := newNodeFixture(t) // the script's node timeout: a restart takes far less
	ctx := context.Background()
	nl := &nodeLoad{st: fx.st, dead: fx.dead, masterOf: fx.masterOf}
	stop := nl.run(fx.names, 16)
	defer stop()
	daemontest.Eventually(t, "the load to be answered", func() bool { return nl.answered.Load() >= 500 })
	pid := fx.kill(t)
	daemontest.Eventually(t, "the killed master's process to end", func() bool { return syscall.Kill(pid, 0) != nil })
	port := fx.dead[strings.LastIndexByte(fx.dead, ':')+1:]
	cmd := exec.Command(filepath.Join("..", "..", "..", "scripts", "redis-cluster.sh"), "restart-node", port)
	cmd.Env = append(os.Environ(), fx.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redis-cluster.sh restart-node %s: %v\n%s", port, err, out)
	}
	daemontest.Eventually(t, "the restarted master to serve its slots", func() bool { return clusterOK(ctx, []string{fx.dead}) })
	daemontest.Eventually(t, "the restarted master's outage to end", func() bool {
		fl := fx.flips.of(fx.dead)
		return len(fl) >= 2 && !fl[len(fl)-1]
	})
	// Calls go on past the rejoin: a flip back to memory would show.
	after := nl.deadFromRedis.Load()
	daemontest.Eventually(t, "the restarted master's breakers to answer from Redis", func() bool {
		return nl.deadFromRedis.Load() >= after+300
	})
	stop()
	nl.log(t, fx.flips)
	if n := nl.liveDegraded.Load(); n != 0 {
		t.Errorf("%d answers for breakers on the other masters were degraded, want 0", n)
	}
	if nl.deadDegraded.Load() == 0 {
		t.Errorf("no answer for the restarted master's breakers came from memory: the kill was not seen")
	}
	fx.checkOnlyDeadFlipped(t)
}

// nodeLoad calls Allow and, when let through, Record (a timeout half of
// the time) on the store in a loop, and counts the answers by whether the
// breaker's master is the dead one and whether they were degraded.
type nodeLoad struct {
	st       *store.Store
	dead     string
	masterOf map[string]string

	answered, errors            atomic.Int64
	liveAnswered, liveDegraded  atomic.Int64
	deadDegraded, deadFromRedis atomic.Int64
}

func (l *nodeLoad) run(names []string, workers int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprintf("w%02d", w)
			for i := w; ctx.Err() == nil; i++ {
				l.call(ctx, names[i%len(names)], worker, i%2 == 0)
			}
		}()
	}
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }
}

func (l *nodeLoad) call(ctx context.Context, name, worker string, fail bool) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	a, err := l.st.Allow(cctx, name, worker)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		l.errors.Add(1)
		return
	}
	l.count(name, a.GetDegraded())
	if a.GetDecision() != pb.Decision_DECISION_ALLOWED && a.GetDecision() != pb.Decision_DECISION_PROBE {
		return
	}
	outcome := pb.Outcome_OUTCOME_SUCCESS
	if fail {
		outcome = pb.Outcome_OUTCOME_TIMEOUT
	}
	r, err := l.st.Record(cctx, &pb.RecordRequest{Breaker: name, WorkerId: worker, Ticket: a.GetTicket(), Outcome: outcome, LatencyMs: 100})
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		l.errors.Add(1)
		return
	}
	l.count(name, r.GetDegraded())
}

func (l *nodeLoad) count(name string, degraded bool) {
	l.answered.Add(1)
	switch {
	case l.masterOf[name] != l.dead:
		l.liveAnswered.Add(1)
		if degraded {
			l.liveDegraded.Add(1)
		}
	case degraded:
		l.deadDegraded.Add(1)
	default:
		l.deadFromRedis.Add(1)
	}
}

func (l *nodeLoad) log(t *testing.T, f *flips) {
	t.Helper()
	t.Logf("answers: %d for breakers on live masters (%d degraded), %d for the faulted master's (%d degraded, %d from Redis); %d errors; flips %v",
		l.liveAnswered.Load(), l.liveDegraded.Load(), l.deadDegraded.Load()+l.deadFromRedis.Load(), l.deadDegraded.Load(),
		l.deadFromRedis.Load(), l.errors.Load(), f.all())
}

// TestClusterReadsAgreeWithAllowInAnOutage: one master is killed (its
// replica takes over only after a 15 s node timeout); Allow answers its
// breakers from memory, and so do Get and List: a breaker tripped in
// memory reads open there, while a breaker pinned open on a live master
// reads from Redis, not degraded.
func TestClusterReadsAgreeWithAllowInAnOutage(t *testing.T) {
	fx := newNodeFixture(t, "REDIS_CLUSTER_NODE_TIMEOUT=15000")
	ctx := context.Background()
	dead, live := fx.names[0], ""
	for _, n := range fx.names {
		if fx.masterOf[n] != fx.dead {
			live = n
			break
		}
	}
	if _, err := fx.st.Force(ctx, live, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance", 0, "alice"); err != nil {
		t.Fatal(err)
	}
	fx.kill(t)
	for i := range 5 { // the default policy's threshold, from 2 workers, in memory
		worker := fmt.Sprintf("w%d", i%2)
		a, err := fx.st.Allow(ctx, dead, worker)
		if err != nil || !a.GetDegraded() {
			t.Fatalf("Allow(%q) after its master died = %v, %v; want a degraded answer", dead, a, err)
		}
		if _, err := fx.st.Record(ctx, &pb.RecordRequest{Breaker: dead, WorkerId: worker, Ticket: a.GetTicket(), Outcome: pb.Outcome_OUTCOME_TIMEOUT}); err != nil {
			t.Fatal(err)
		}
	}
	if a, err := fx.st.Allow(ctx, dead, "w9"); err != nil || a.GetDecision() != pb.Decision_DECISION_DENIED_OPEN {
		t.Fatalf("Allow(%q) after 5 timeouts in memory = %v, %v; want DENIED_OPEN", dead, a.GetDecision(), err)
	}
	if st, err := fx.st.Get(ctx, dead); err != nil || st.GetState() != pb.State_STATE_OPEN || !strings.Contains(st.GetReason(), "cannot reach its Redis") {
		t.Errorf("Get(%q) = %v, %v; want OPEN from memory", dead, st, err)
	}
	if st, err := fx.st.Get(ctx, live); err != nil || st.GetState() != pb.State_STATE_FORCED_OPEN || strings.Contains(st.GetReason(), "cannot reach its Redis") {
		t.Errorf("Get(%q) on a live master = %v, %v; want FORCED_OPEN from Redis", live, st, err)
	}
	listed, err := fx.st.List(ctx, pb.State_STATE_OPEN, pb.State_STATE_FORCED_OPEN)
	if err != nil {
		t.Fatalf("List with a master dead: %v", err)
	}
	got := map[string]pb.State{}
	for _, st := range listed {
		got[st.GetBreaker()] = st.GetState()
	}
	if got[dead] != pb.State_STATE_OPEN || got[live] != pb.State_STATE_FORCED_OPEN {
		t.Errorf("List with a master dead: %q %v, %q %v; want OPEN (memory), FORCED_OPEN (Redis)", dead, got[dead], live, got[live])
	}
	// The keys this test made are deleted once a replica serves them.
	daemontest.Eventually(t, "a replica to take over from the killed master "+fx.dead, func() bool {
		fx.rdb.ReloadState(ctx)
		m, err := fx.rdb.MasterForKey(ctx, store.KeysOf(dead).State)
		return err == nil && m.Options().Addr != fx.dead && clusterOK(ctx, fx.others())
	})
}
