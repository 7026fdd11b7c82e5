package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// MemoryOptions configure Memory.
type MemoryOptions struct {
	// RedisServer is the redis-server binary; the measurement always runs
	// on servers it starts, so that nothing else moves INFO memory.
	RedisServer string
	// Breakers is how many breakers each measurement fills. Default 10,000.
	Breakers int
	// SmallNodeBytes is the stream-node-max-bytes measured beside Redis's
	// default (4096). Default 512.
	SmallNodeBytes int
	// Callers is the number of concurrent callers filling them. Default 64.
	Callers int
}

// DefaultMemoryOptions are 10,000 breakers, 512-byte stream nodes, 64
// callers.
func DefaultMemoryOptions() MemoryOptions {
	return MemoryOptions{RedisServer: "redis-server", Breakers: 10_000, SmallNodeBytes: 512, Callers: 64}
}

// memFigure is one measurement: the INFO memory delta and key count per
// breaker.
type memFigure struct {
	bytesPer, keysPer float64
}

// Memory measures, on a fresh redis-server per setting, the bytes and keys
// per open breaker (tripped by SERVER_ERROR failures from two workers) and
// per breaker holding a failure run below the threshold (two failures from
// two workers), as INFO memory used_memory deltas over o.Breakers breakers,
// with Redis's default stream-node-max-bytes and with o.SmallNodeBytes.
func Memory(ctx context.Context, o MemoryOptions, w io.Writer) error {
	if o.Breakers < 1 {
		return fmt.Errorf("--memory-breakers: must be at least 1, got %d", o.Breakers)
	}
	if o.SmallNodeBytes < 1 {
		return fmt.Errorf("--stream-node-max-bytes: must be at least 1, got %d", o.SmallNodeBytes)
	}
	if o.Callers < 1 {
		o.Callers = 64
	}
	fmt.Fprintf(w, "breakerbench --memory: INFO memory used_memory deltas over %d breakers, on a redis-server the bench starts for each setting\n\n", o.Breakers)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stream-node-max-bytes\tbytes/open breaker\tkeys/open breaker\tbytes/failure run\tkeys/failure run\t")
	for _, nodeBytes := range []int{0, o.SmallNodeBytes} {
		var extra []string
		label := "4096 (default)"
		if nodeBytes > 0 {
			extra = []string{"--stream-node-max-bytes", strconv.Itoa(nodeBytes)}
			label = strconv.Itoa(nodeBytes)
		}
		open, run, err := measureMemory(ctx, o, extra)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%.0f\t%.2f\t\n", label, open.bytesPer, open.keysPer, run.bytesPer, run.keysPer)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nA healthy breaker (closed, no failure run) holds no keys. The open breaker's event stream is most of its")
	fmt.Fprintln(w, "cost: Redis preallocates a stream node of up to stream-node-max-bytes (4096 by default) for its first entry.")
	return nil
}

func measureMemory(ctx context.Context, o MemoryOptions, extra []string) (open, run memFigure, err error) {
	s, err := startRedis(ctx, o.RedisServer, extra...)
	if err != nil {
		return open, run, err
	}
	defer s.stop()
	addr, stop, err := startDaemon(ctx, s.addr, "")
	if err != nil {
		return open, run, err
	}
	defer stop()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return open, run, err
	}
	defer conn.Close()
	api := pb.NewBreakerServiceClient(conn)
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	defer rdb.Close()

	// Warm up scripts and connections on a healthy breaker (no keys).
	for i := 0; i < 100; i++ {
		if _, err := api.Record(ctx, &pb.RecordRequest{Breaker: "warm", WorkerId: "w", Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
			return open, run, err
		}
	}
	if open, err = fill(ctx, api, rdb, o, "open", 0); err != nil {
		return open, run, err
	}
	run, err = fill(ctx, api, rdb, o, "run", 2)
	return open, run, err
}

// fill gives o.Breakers new breakers failures SERVER_ERROR from two
// workers in turn: until open when failures is 0, else that many. It
// returns the used_memory and DBSIZE deltas per breaker.
func fill(ctx context.Context, api pb.BreakerServiceClient, rdb *redis.Client, o MemoryOptions, kind string, failures int) (memFigure, error) {
	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return memFigure{}, err
	}
	keys0, err := rdb.DBSize(ctx).Result()
	if err != nil {
		return memFigure{}, err
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, o.Callers)
	for c := 0; c < o.Callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b := next.Add(1) - 1
				if b >= int64(o.Breakers) {
					return
				}
				name := fmt.Sprintf("mem-%s-%06d", kind, b)
				for i := 0; failures == 0 || i < failures; i++ {
					res, err := api.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: fmt.Sprintf("mem-w%d", i%2),
						Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: "HTTP 503"})
					if err != nil {
						errs <- fmt.Errorf("memory: record %s: %w", name, err)
						return
					}
					if failures == 0 && res.GetState().GetState() == pb.State_STATE_OPEN {
						break
					}
					if i > 20 {
						errs <- fmt.Errorf("memory: %s not open after 20 failures", name)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return memFigure{}, err
	}
	after, err := usedMemory(ctx, rdb)
	if err != nil {
		return memFigure{}, err
	}
	keys1, err := rdb.DBSize(ctx).Result()
	if err != nil {
		return memFigure{}, err
	}
	n := float64(o.Breakers)
	return memFigure{bytesPer: float64(after-before) / n, keysPer: float64(keys1-keys0) / n}, nil
}
