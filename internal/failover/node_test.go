package failover

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/daemontest"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// flips records each node's outage flips (OnOutage) in order.
type flips struct {
	mu sync.Mutex
	by map[string][]bool
}

func (f *flips) add(node string, down bool) {
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

// TestClusterDeadMasterOutageIsPerNode: a daemon's store on a 3+3 Redis
// Cluster of the test's own, under load from 16 workers on 30 breakers
// spread over the three masters. One master is killed (SIGKILL) and its
// replica takes over. The outage is judged per node: the dead master goes
// down once and comes back once (when its replica serves its slots), the
// live masters never flip, and no answer for a breaker on a live master
// is degraded; the dead master's breakers answer from memory meanwhile,
// then from Redis again.
func TestClusterDeadMasterOutageIsPerNode(t *testing.T) {
	needRedis(t, "redis-server", "redis-cli")
	ports := freePorts(t, 12)
	dir := t.TempDir()
	vals := script(t, "redis-cluster.sh", []string{
		"REDIS_CLUSTER_PORTS=" + join(ports[:6]), "REDIS_CLUSTER_BUS_PORTS=" + join(ports[6:]),
		"REDIS_CLUSTER_DIR=" + dir, "REDIS_CLUSTER_NODE_TIMEOUT=1000"})
	addrs := strings.Split(vals[testredis.EnvClusterAddrs], ",")
	if len(addrs) != 6 {
		t.Fatalf("redis-cluster.sh printed %v", vals)
	}
	b := testredis.ClusterAt(t, addrs)
	ctx := context.Background()
	f := &flips{by: map[string][]bool{}}
	// The daemon's retries (internal/daemon connect): one retry, one dial.
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: 1, DialerRetries: 1})
	defer rdb.Close()
	st := store.New(rdb, store.Options{Now: b.Clock(), Channel: b.Prefix + "events", OnOutage: f.add})
	defer st.Close()
	if err := st.Load(ctx); err != nil {
		t.Fatal(err)
	}

	var names []string
	masterOf := map[string]string{}
	byMaster := map[string]int{}
	for i := range 30 {
		n := b.Breaker(fmt.Sprintf("node-%02d", i))
		m, err := rdb.MasterForKey(ctx, store.KeysOf(n).State)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
		masterOf[n] = m.Options().Addr
		byMaster[m.Options().Addr]++
	}
	if len(byMaster) != 3 {
		t.Fatalf("30 breakers on %d masters (%v), want all 3", len(byMaster), byMaster)
	}
	dead := masterOf[names[0]]

	nl := &nodeLoad{st: st, dead: dead, masterOf: masterOf}
	stop := nl.run(names, 16)
	defer stop()
	daemontest.Eventually(t, "the load to be answered", func() bool { return nl.answered.Load() >= 500 })

	port := dead[strings.LastIndexByte(dead, ':')+1:]
	pidFile := filepath.Join(dir, port, "redis.pid")
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
		t.Fatalf("kill master %s (pid %d): %v", dead, p, err)
	}
	_ = os.Remove(pidFile) // so that the script's stop never signals a reused pid
	daemontest.Eventually(t, "calls for the dead master's breakers to be answered from memory", func() bool {
		return nl.deadDegraded.Load() >= 50
	})
	var others []string
	for _, a := range addrs {
		if a != dead {
			others = append(others, a)
		}
	}
	daemontest.Eventually(t, "a replica to take over from the killed master "+dead, func() bool { return clusterOK(ctx, others) })
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

	t.Logf("answers: %d for breakers on live masters (%d degraded), %d for the dead master's (%d degraded, %d from Redis); %d errors; flips %v",
		nl.liveAnswered.Load(), nl.liveDegraded.Load(), nl.deadDegraded.Load()+nl.deadFromRedis.Load(), nl.deadDegraded.Load(),
		nl.deadFromRedis.Load(), nl.errors.Load(), f.all())
	if n := nl.liveDegraded.Load(); n != 0 {
		t.Errorf("%d answers for breakers on live masters were degraded, want 0: a dead master sent them to memory", n)
	}
	// The dead master's outage ends once the poll sees that it serves no
	// slot any more (its breakers may answer from the new master first).
	daemontest.Eventually(t, "the dead master's outage to end", func() bool {
		fl := f.of(dead)
		return len(fl) >= 2 && !fl[len(fl)-1]
	})
	if fl := f.of(dead); len(fl) != 2 || !fl[0] || fl[1] {
		t.Errorf("the dead master %s flipped %v, want [true false]: once down, once back", dead, fl)
	}
	for node, fl := range f.all() {
		if node != dead {
			t.Errorf("node %q flipped %v, want no flip: only the dead master %s is out", node, fl, dead)
		}
	}
	if st.Degraded() {
		t.Errorf("Degraded() = true after the replica took over, want false")
	}
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
