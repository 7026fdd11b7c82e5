package bench

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/internal/tracing"
)

// TestDriversWaitForTheBenchToStart: a driver's timed run starts only once
// the bench has read its counters. The bench here is slow to read them
// (it waits until the driver's warm-up calls have stopped reaching Redis),
// and still every timed pair's two scripts come after its read: a driver
// that went on would have finished its 30 ms run meanwhile, and the
// counters read after it would show none of its pairs.
func TestDriversWaitForTheBenchToStart(t *testing.T) {
	testredis.Tier(t, "bench")
	ctx := testredis.UntilDeadline(t)
	srv, err := startRedis(ctx, Defaults().RedisServer)
	if err != nil {
		t.Skipf("the drivers' own Redis: %v", err)
	}
	defer srv.stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer rdb.Close()
	addrs, stop, err := serveDaemon(ctx, srv.addr, "", true, tracing.Env{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, d := range []driver{
		{command: "python3", script: pyDriver, mode: "strict", callers: 2},
		{command: "python3", script: pyDriver, async: true, mode: "strict", callers: 2},
		{command: "node", script: tsDriver, mode: "strict", callers: 2},
	} {
		t.Run(fmt.Sprintf("%s async=%v", d.command, d.async), func(t *testing.T) {
			if _, err := exec.LookPath(d.command); err != nil {
				t.Skipf("%s is not in PATH", d.command)
			}
			scripts := func() int64 {
				_, by, err := commandCalls(ctx, rdb)
				if err != nil {
					t.Fatal(err)
				}
				return scriptRuns(by)
			}
			var atBegin int64
			begin := func() error {
				last := int64(-1)
				daemontest.Eventually(t, "the driver's warm-up calls stop reaching Redis", func() bool {
					n := scripts()
					quiet := n == last
					last = n
					time.Sleep(20 * time.Millisecond) // between two reads of the count
					return quiet
				})
				atBegin = last
				return nil
			}
			o := Defaults()
			o.Breakers = 10
			smp, err := d.run(ctx, &target{httpURL: "http://" + addrs.http, prefix: t.Name() + "/"}, o, 30*time.Millisecond, 50*time.Millisecond, begin)
			if err != nil {
				t.Fatal(err)
			}
			after := scripts() - atBegin
			if smp.ops == 0 || smp.errs != 0 || after < 2*smp.ops {
				t.Errorf("%d pairs, %d errors, %d scripts after the bench's read; want pairs, no errors, and two scripts a pair after the read",
					smp.ops, smp.errs, after)
			}
		})
	}
}
