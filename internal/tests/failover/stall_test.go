package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The stall faults: a Redis (or one Cluster master) that hangs instead
// of refusing, under load from 16 workers on two daemons' stores, each
// call with a worker client's 4 s deadline. A blackholed link (a proxy
// that forwards nothing and keeps its connections open), a frozen process
// (SIGSTOP, then SIGCONT), replies slower than the decision timeout (a
// proxy adding stallDelay). The counts that must hold: no call outlives its
// caller's deadline; at most OutageTimeouts-1 calls per daemon fail
// before the stalled node goes to memory (a call that failed because its
// daemon ran late aside: store.LateWords), every later one is answered
// from memory; no call is let through at a breaker known open (forced
// open before the stall); each daemon flips the stalled node once down
// and once back, and no other node.

// stallCallerDeadline is a worker client's RPC timeout.
const stallCallerDeadline = 4 * time.Second

// stallBound is the daemons' decision timeout here: above what a healthy
// node takes on a machine busy with -race and other copies of the suite
// (a healthy Cluster node's reply has been seen at 1.06 s with three
// copies running; the product's default is tighter), below the caller's
// deadline, so a stall still goes to memory before any caller gives up.
const stallBound = 2 * time.Second

// stallDelay is the latency fault: replies this much late, past stallBound.
const stallDelay = 3 * stallBound

// stallDaemon is one daemon's store on its own client, seeded by its own
// event hub, with the breakers it has heard of.
type stallDaemon struct {
	st     *store.Store
	flips  *flips
	heard  sync.Map
	flipAt sync.Map // time.Time of each flip to memory (true) and back (false), by node, for the report
}

// stallRig is two daemons on one Redis deployment, with breakers
// spread over it; pinned ones are forced open before the fault.
type stallRig struct {
	daemons  []*stallDaemon
	names    []string
	pinned   map[string]bool
	masterOf map[string]string // "" for a single Redis or Sentinel
	stalled  string            // the node the fault hits ("" but on a Cluster)
}

// newStallRig starts two daemons whose clients newClient makes (the
// daemon's options: one retry, one dial, context deadlines honoured),
// with 20 breakers on b, and forces open the first 4 on the stalled node.
func newStallRig(t *testing.T, b *testredis.Backend, newClient func() redis.UniversalClient, stalled string) *stallRig {
	t.Helper()
	r := &stallRig{pinned: map[string]bool{}, masterOf: map[string]string{}, stalled: stalled}
	ctx := context.Background()
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	for range 2 {
		rdb := newClient()
		t.Cleanup(func() { _ = rdb.Close() })
		d := &stallDaemon{flips: &flips{by: map[string][]bool{}}}
		onOutage := func(node string, down bool, cause error) {
			d.flipAt.Store(fmt.Sprint(node, down), time.Now())
			d.flips.add(node, down, cause)
		}
		d.st = store.New(rdb, store.Options{Now: b.Clock(), Channel: b.Prefix + "events", OnOutage: onOutage, DecisionTimeout: stallBound})
		t.Cleanup(d.st.Close)
		if err := d.st.Load(ctx); err != nil {
			t.Fatal(err)
		}
		hub := events.NewHub(rdb, d.st.Channel(), discard)
		hub.Observe(func(e *pb.Event) { d.st.ObserveEvent(e); d.heard.Store(e.GetBreaker(), true) })
		stop, err := hub.Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		r.daemons = append(r.daemons, d)
	}
	cc, _ := b.Client.(*redis.ClusterClient)
	for i := range 40 {
		n := b.Breaker(fmt.Sprintf("stall-%02d", i))
		if cc != nil {
			m, err := cc.MasterForKey(ctx, store.KeysOf(n).State)
			if err != nil {
				t.Fatal(err)
			}
			r.masterOf[n] = m.Options().Addr
		}
		r.names = append(r.names, n)
		if r.masterOf[n] == stalled && len(r.pinned) < 4 {
			r.pinned[n] = true
			if _, err := r.daemons[0].st.Force(ctx, n, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance", 0, "alice"); err != nil {
				t.Fatal(err)
			}
		}
	}
	daemontest.Eventually(t, "both daemons to hear the pinned breakers", func() bool {
		for _, d := range r.daemons {
			for n := range r.pinned {
				if _, ok := d.heard.Load(n); !ok {
					return false
				}
			}
		}
		return true
	})
	return r
}

// stallLoad counts what the calls got, split by whether their breaker is
// on the stalled node.
type stallLoad struct {
	r *stallRig

	failed, pastDeadline, atOpen atomic.Int64 // calls to the stalled node's breakers
	// faulted is set just before the fault; failedBefore counts the
	// stalled node's calls that failed before it (a busy host's healthy
	// Redis slower than the bound: a figure, not the stall's toll).
	faulted      atomic.Bool
	failedBefore atomic.Int64
	// late counts the stalled node's calls that failed because their
	// daemon ran late (store.LateWords): no news of Redis, so they begin
	// no outage and do not count against OutageTimeouts.
	late                       atomic.Int64
	memory, fromRedis          atomic.Int64 // answers for the stalled node's breakers
	liveAnswered, liveDegraded atomic.Int64 // answers for the other nodes' breakers
	liveFailed                 atomic.Int64
	slowestMemory              atomic.Int64 // ns: the slowest answer from memory (a figure)
	slowestOnceDown            atomic.Int64 // ns: the slowest of those asked once the node was out (a figure)
	faultAt                    atomic.Int64 // unix ns of the fault
	// toRedis counts the calls at the stalled node in flight that were
	// sent while their daemon had it on Redis: the fault holds until
	// there are none (each is answered, failed or sent to memory).
	toRedis atomic.Int64

	mu       sync.Mutex
	failures []string // each call at the stalled node that failed or was late, said
}

func (l *stallLoad) run(workers int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := w % len(l.r.daemons)
			worker := fmt.Sprintf("w%02d via daemon %d", w, d)
			for i := w; ctx.Err() == nil; i++ {
				l.call(ctx, l.r.daemons[d].st, l.r.names[i%len(l.r.names)], worker, i%3 == 0)
				time.Sleep(time.Millisecond) // a worker's tool call: the load leaves the host some CPU
			}
		}()
	}
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }
}

func (l *stallLoad) call(ctx context.Context, st *store.Store, name, worker string, fail bool) {
	stalled := l.r.masterOf[name] == l.r.stalled
	cctx, cancel := context.WithTimeout(ctx, stallCallerDeadline)
	defer cancel()
	down := st.Degraded()
	if stalled && !down {
		l.toRedis.Add(1)
		defer l.toRedis.Add(-1)
	}
	start := time.Now()
	a, err := st.Allow(cctx, name, worker)
	took := time.Since(start)
	if ctx.Err() != nil {
		return
	}
	if down && a.GetDegraded() {
		maxOf(&l.slowestOnceDown, took)
	}
	l.say(stalled, "Allow by "+worker, start, took, err)
	if !l.answer(stalled, a.GetDegraded(), took, err) {
		return
	}
	let := a.GetDecision() == pb.Decision_DECISION_ALLOWED || a.GetDecision() == pb.Decision_DECISION_PROBE
	if let && l.r.pinned[name] {
		l.atOpen.Add(1)
	}
	if !let {
		return
	}
	outcome := pb.Outcome_OUTCOME_SUCCESS
	if fail {
		outcome = pb.Outcome_OUTCOME_TIMEOUT
	}
	start = time.Now()
	rec, err := st.Record(cctx, &pb.RecordRequest{Breaker: name, WorkerId: worker, Ticket: a.GetTicket(), Outcome: outcome, LatencyMs: 100})
	took = time.Since(start)
	if ctx.Err() == nil {
		l.say(stalled, "Record by "+worker, start, took, err)
		l.answer(stalled, rec.GetDegraded(), took, err)
	}
}

// say notes a failed call at the stalled node: which call, whose, sent
// when (from the fault's start), how long it took, what it got.
func (l *stallLoad) say(stalled bool, call string, sent time.Time, took time.Duration, err error) {
	if err == nil || !stalled {
		return
	}
	at := "before the fault"
	if f := l.faultAt.Load(); f != 0 {
		at = fmt.Sprintf("%v after the fault began", sent.Sub(time.Unix(0, f)).Round(time.Millisecond))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures = append(l.failures, fmt.Sprintf("%s sent %s, failed after %v (caller's deadline %v): %v",
		call, at, took.Round(time.Millisecond), stallCallerDeadline, err))
}

// answer counts one answer (or its error) and reports whether it was one.
func (l *stallLoad) answer(stalled, degraded bool, took time.Duration, err error) bool {
	switch {
	case err != nil && stalled && (errors.Is(err, context.DeadlineExceeded) || took >= stallCallerDeadline):
		l.pastDeadline.Add(1)
	case err != nil && stalled && !l.faulted.Load():
		l.failedBefore.Add(1)
	case err != nil && stalled && strings.Contains(status.Convert(err).Message(), store.LateWords):
		l.late.Add(1)
	case err != nil && stalled:
		l.failed.Add(1)
	case err != nil:
		l.liveFailed.Add(1)
	case !stalled:
		l.liveAnswered.Add(1)
		if degraded {
			l.liveDegraded.Add(1)
		}
	case degraded:
		l.memory.Add(1)
		maxOf(&l.slowestMemory, took)
	default:
		l.fromRedis.Add(1)
	}
	return err == nil
}

// maxOf raises m to d if d is larger.
func maxOf(m *atomic.Int64, d time.Duration) {
	for v := m.Load(); int64(d) > v && !m.CompareAndSwap(v, int64(d)); v = m.Load() {
	}
}

// stallThrough runs the load, applies fault once it is answered from
// Redis, waits for 300 answers from memory, both daemons in their outage
// and no call sent to Redis before it still waiting (a fault that ends
// sooner would fail those calls after the node came back: replies still
// late, connections dropped), ends the fault, waits for both daemons to
// be back on Redis and 300 more answers from it, and checks the counts.
func stallThrough(t *testing.T, r *stallRig, what string, fault, end func()) {
	t.Helper()
	l := &stallLoad{r: r}
	stop := l.run(16)
	defer stop()
	daemontest.Eventually(t, "the load to be answered from Redis", func() bool { return l.fromRedis.Load() >= 300 })
	l.faulted.Store(true)
	l.faultAt.Store(time.Now().UnixNano())
	fault()
	daemontest.Eventually(t, what+": answers from memory", func() bool { return l.memory.Load() >= 300 })
	daemontest.Eventually(t, what+": both daemons in their outage, no call still waiting on Redis", func() bool {
		for _, d := range r.daemons {
			if !d.st.Degraded() {
				return false
			}
		}
		return l.toRedis.Load() == 0
	})
	end()
	daemontest.Eventually(t, what+": both daemons back on Redis", func() bool {
		for _, d := range r.daemons {
			if fl := d.flips.of(r.stalled); len(fl) < 2 || fl[len(fl)-1] {
				return false
			}
		}
		return true
	})
	after := l.fromRedis.Load()
	daemontest.Eventually(t, what+": answers from Redis again", func() bool { return l.fromRedis.Load() >= after+300 })
	stop()
	t.Logf("figure %s: %d calls at the stalled node failed (Unavailable; %d more before the fault, %d because their daemon ran late), %d answered from memory (slowest %v; asked once the node was out, slowest %v), %d from Redis; past their deadline %d; let through at breakers known open %d; other nodes: %d answered, %d degraded, %d failed",
		what, l.failed.Load(), l.failedBefore.Load(), l.late.Load(), l.memory.Load(), time.Duration(l.slowestMemory.Load()).Round(time.Millisecond), time.Duration(l.slowestOnceDown.Load()).Round(time.Microsecond), l.fromRedis.Load(),
		l.pastDeadline.Load(), l.atOpen.Load(), l.liveAnswered.Load(), l.liveDegraded.Load(), l.liveFailed.Load())
	if n := l.pastDeadline.Load(); n != 0 {
		t.Errorf("%s: %d calls outlived their caller's %v deadline, want 0", what, n, stallCallerDeadline)
	}
	if n, most := l.failed.Load(), int64(len(r.daemons)*(store.OutageTimeouts-1)); n > most {
		t.Errorf("%s: %d calls at the stalled node failed, want at most %d (OutageTimeouts-1 per daemon)", what, n, most)
	}
	if t.Failed() {
		for i, d := range r.daemons {
			for _, down := range []bool{true, false} {
				if at, ok := d.flipAt.Load(fmt.Sprint(r.stalled, down)); ok {
					t.Logf("%s: daemon %d flipped the stalled node (down %t) %v after the fault began", what, i, down, at.(time.Time).Sub(time.Unix(0, l.faultAt.Load())).Round(time.Millisecond))
				}
			}
		}
		t.Logf("%s: the calls at the stalled node that failed:\n%s", what, strings.Join(l.failures, "\n"))
	}
	if n := l.atOpen.Load(); n != 0 {
		t.Errorf("%s: %d calls let through at breakers forced open, want 0", what, n)
	}
	if n := l.liveDegraded.Load() + l.liveFailed.Load(); n != 0 {
		t.Errorf("%s: %d calls at other nodes degraded or failed, want 0", what, n)
	}
	for i, d := range r.daemons {
		if fl := d.flips.of(r.stalled); len(fl) != 2 || !fl[0] || fl[1] {
			t.Errorf("%s: daemon %d flipped the stalled node %v, want [true false]", what, i, fl)
		}
		for node, fl := range d.flips.all() {
			if node != r.stalled {
				t.Errorf("%s: daemon %d flipped node %q %v, want no flip", what, i, node, fl)
			}
		}
	}
}

// daemonClient is the daemon's Redis client options (internal/daemon
// connect) on o.
func daemonClient(o *redis.Options) *redis.Client {
	o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled = 1, 1, true
	return redis.NewClient(o)
}

// startRedis starts a redis-server of the test's own, stopped when t
// ends, and returns its address and process.
func startRedis(t *testing.T) (string, *os.Process) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		port := freePorts(t, 1)[0]
		cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		up := false
		for range 100 {
			if c.Ping(context.Background()).Err() == nil {
				up = true
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = c.Close()
		if up {
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Process.Signal(syscall.SIGCONT); _ = cmd.Wait() })
			return addr, cmd.Process
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if attempt == startAttempts {
			t.Fatalf("redis-server on %s never answered", addr)
		}
	}
}

// singleBackend is a backend on the Redis at addr (its admin client,
// with the backend's clock and key prefix).
func singleBackend(t *testing.T, addr string) *testredis.Backend {
	t.Helper()
	t.Setenv(testredis.EnvAddr, addr)
	return testredis.Real(t)
}

// TestStallSingleRedis: a single Redis, through each stall fault.
func TestStallSingleRedis(t *testing.T) {
	needRedis(t, "redis-server")
	t.Run("blackhole", func(t *testing.T) {
		addr, _ := startRedis(t)
		b := singleBackend(t, addr)
		proxy := testredis.NewProxy(t, addr)
		r := newStallRig(t, b, func() redis.UniversalClient { return daemonClient(&redis.Options{Addr: proxy.Addr()}) }, "")
		stallThrough(t, r, "blackholed link", proxy.Stall, func() { proxy.Restore(t) })
	})
	t.Run("latency", func(t *testing.T) {
		addr, _ := startRedis(t)
		b := singleBackend(t, addr)
		proxy := testredis.NewProxy(t, addr)
		r := newStallRig(t, b, func() redis.UniversalClient { return daemonClient(&redis.Options{Addr: proxy.Addr()}) }, "")
		stallThrough(t, r, "replies "+stallDelay.String()+" late", func() { proxy.Delay(stallDelay) }, func() { proxy.Delay(0) })
	})
	t.Run("sigstop", func(t *testing.T) {
		addr, p := startRedis(t)
		b := singleBackend(t, addr)
		r := newStallRig(t, b, func() redis.UniversalClient { return daemonClient(&redis.Options{Addr: addr}) }, "")
		stallThrough(t, r, "SIGSTOP", func() { signal(t, p.Pid, syscall.SIGSTOP) }, func() { signal(t, p.Pid, syscall.SIGCONT) })
	})
}

func signal(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("kill -%v %d: %v", sig, pid, err)
	}
}

// pidOf reads the pid file the scripts write for the node at addr.
func pidOf(t *testing.T, dir, addr string) int {
	t.Helper()
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	pid, err := os.ReadFile(filepath.Join(dir, port, "redis.pid"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// stallFaults are the stall faults on one node at addr (pid its
// process), each applied by fault and ended by end; proxy is the proxy
// the daemons' clients dial addr through (via).
func stallFaults(t *testing.T, proxy *testredis.Proxy, pid int) []struct {
	name       string
	fault, end func()
} {
	return []struct {
		name       string
		fault, end func()
	}{
		{"blackhole", proxy.Stall, func() { proxy.Restore(t) }},
		{"latency", func() { proxy.Delay(stallDelay) }, func() { proxy.Delay(0) }},
		{"sigstop", func() { signal(t, pid, syscall.SIGSTOP) }, func() { signal(t, pid, syscall.SIGCONT) }},
	}
}

// via is a go-redis Dialer that dials node through proxy (a link of the
// daemon's to that node alone) and every other address directly.
func via(node string, proxy *testredis.Proxy) func(context.Context, string, string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == node {
			addr = proxy.Addr()
		}
		return d.DialContext(ctx, network, addr)
	}
}

// TestStallSentinelMaster: Sentinel's master stalled (a blackholed link
// from the daemons, replies late past the bound, the process frozen by
// SIGSTOP) for less than Sentinel's down-after (30 s here): a stall, not
// a failover. The daemons reach the master Sentinel names through a proxy
// of their own; Sentinel's own links do not go through it.
func TestStallSentinelMaster(t *testing.T) {
	needRedis(t, "redis-server", "redis-sentinel", "redis-cli")
	dir := t.TempDir()
	vals, ports, _ := startScript(t, "redis-sentinel.sh", 5, func(ports []int) []string {
		return []string{"REDIS_SENTINEL_PORTS=" + join(ports), "REDIS_SENTINEL_DIR=" + dir, "REDIS_SENTINEL_DOWN_AFTER=30000"}
	})
	if vals["BREAKERD_REDIS_URL"] == "" {
		t.Fatalf("redis-sentinel.sh printed %v", vals)
	}
	var sentinels []string
	for _, p := range ports[2:] {
		sentinels = append(sentinels, fmt.Sprintf("127.0.0.1:%d", p))
	}
	b := testredis.SentinelAt(t, "mymaster", sentinels)
	master := fmt.Sprintf("127.0.0.1:%d", ports[0])
	proxy := testredis.NewProxy(t, master)
	pid := pidOf(t, dir, master)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	for _, f := range stallFaults(t, proxy, pid) {
		t.Run(f.name, func(t *testing.T) {
			r := newStallRig(t, b, func() redis.UniversalClient {
				return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: sentinels, Dialer: via(master, proxy),
					MaxRetries: 1, DialerRetries: 1, ContextTimeoutEnabled: true})
			}, "")
			stallThrough(t, r, "Sentinel master, "+f.name, f.fault, f.end)
		})
	}
}

// TestStallClusterMaster: one Cluster master stalled (a blackholed link
// from the daemons, replies late past the bound, the process frozen by
// SIGSTOP) for less than the cluster's node timeout (30 s here): its
// breakers go to memory, the other masters' keep answering from Redis,
// never degraded. The daemons reach that master through a proxy of their
// own; the cluster's bus does not go through it.
func TestStallClusterMaster(t *testing.T) {
	fx := newNodeFixture(t, "REDIS_CLUSTER_NODE_TIMEOUT=30000")
	b := testredis.ClusterAt(t, fx.addrs)
	proxy := testredis.NewProxy(t, fx.dead)
	pid := pidOf(t, fx.dir, fx.dead)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	for _, f := range stallFaults(t, proxy, pid) {
		t.Run(f.name, func(t *testing.T) {
			r := newStallRig(t, b, func() redis.UniversalClient {
				return redis.NewClusterClient(&redis.ClusterOptions{Addrs: fx.addrs, Dialer: via(fx.dead, proxy),
					MaxRetries: 1, DialerRetries: 1, ContextTimeoutEnabled: true})
			}, fx.dead)
			stallThrough(t, r, "Cluster master, "+f.name, f.fault, f.end)
		})
	}
}
