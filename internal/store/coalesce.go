package store

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/breakerd/breakerd/internal/replylost"
)

// coalescer sends the scripts of concurrent Allow and Record calls to
// Redis in shared pipelines, through go-redis's automatic pipelining (the
// deferred face, AsyncAutoPipeline, v9.22+): a call is queued, the
// flusher writes every call queued so far as one pipeline, and while that
// pipeline is out the next calls queue behind it, so under load each round
// trip carries many scripts and a lone call still goes out at once. It
// costs the daemon and Redis one write and one read per batch instead of
// per call; Redis runs the same commands.
//
// What each call keeps, as on a plain round trip:
//   - its own reply or error: a script error, a NOSCRIPT, a LOADING reply
//     fail only the call they belong to; a lost connection fails every
//     call of the batch with the same network error, which the outage
//     detection (failed) reads as before;
//   - its deadline: the caller stops waiting when its context ends
//     (go-redis does not cancel a command already queued, so the script
//     may still run, as it may on a plain round trip cut short);
//   - EVALSHA with EVAL on NOSCRIPT: the EVAL runs on the plain client
//     (and loads the script again).
//
// Only a standalone client (or a Sentinel-backed failover client) is
// coalesced; a Redis Cluster client sends each call on its own (its
// per-node automatic pipelining is not tested here).
type coalescer struct {
	rdb redis.UniversalClient
	ap  *redis.AutoPipeliner
	// queued, when set (tests only), is called once a call is queued.
	queued func()
}

// pipelineOptions are go-redis's defaults for the deferred face, spelled
// out: batches of up to 200 commands, one batch in flight at a time (the
// next batch gathers while it is out), no added wait before a flush.
func pipelineOptions() *redis.AutoPipelineOptions {
	return &redis.AutoPipelineOptions{MaxBatchSize: 200, MaxConcurrentBatches: 1}
}

// newCoalescer returns a coalescer on rdb, or nil when rdb is not a
// standalone client or go-redis refuses (a client already closed): the
// store then sends each call on its own round trip.
func newCoalescer(rdb redis.UniversalClient) *coalescer {
	c, ok := rdb.(*redis.Client)
	if !ok {
		return nil
	}
	ap, err := c.AsyncAutoPipelineWithOptions(pipelineOptions())
	if err != nil {
		return nil
	}
	return &coalescer{rdb: rdb, ap: ap}
}

// run executes sc like the package's run, its EVALSHA coalesced with
// other calls'.
func (c *coalescer) run(ctx context.Context, sc script, keys []string, args []any) ([]any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, cmd := c.send(ctx, sc, keys, args)
	err := f.WaitContext(ctx)
	if err != nil && ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return nil, replylost.StillQueued{Err: err, Wait: func() { _ = f.Wait() }}
	}
	return c.answer(ctx, sc, keys, args, cmd, err)
}

// send queues sc's EVALSHA on the shared pipeline; its reply is in once
// f's wait returns something other than its context's end. The keys go
// in as pointers, as the ARGV does (argv.go): no allocation per key, and
// keys is not changed until the reply is in.
func (c *coalescer) send(ctx context.Context, sc script, keys []string, args []any) (f redis.AutoFuture, cmd *redis.Cmd) {
	argv := make([]any, 0, 3+len(keys)+len(args))
	argv = append(argv, "evalsha", sc.hash, len(keys))
	for i := range keys {
		argv = append(argv, &keys[i])
	}
	argv = append(argv, args...)
	cmd = redis.NewCmd(ctx, argv...)
	f = c.ap.Submit(ctx, cmd)
	if c.queued != nil {
		c.queued()
	}
	return f, cmd
}

// answer is the outcome of sc's EVALSHA cmd, whose wait ended with err
// (cmd's own error, once its batch ran): its reply, or the script's error; on NOSCRIPT the script runs again as
// an EVAL on the plain client, within ctx.
func (c *coalescer) answer(ctx context.Context, sc script, keys []string, args []any, cmd *redis.Cmd, err error) ([]any, error) {
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = sc.Eval(ctx, c.rdb, keys, args...)
		err = cmd.Err()
	}
	if err != nil {
		return nil, scriptError(sc, err)
	}
	res, err := cmd.Slice()
	if err != nil {
		return nil, scriptError(sc, err)
	}
	return res, nil
}

// script runs sc for a decision (Allow, Record): coalesced unless
// Options.Unpipelined, in a span of its own when the call's span records
// (a span under one the sampler dropped would be dropped too: every
// sampler the daemon takes decides a child as its parent, by the parent's
// flag or the same trace id). A context ended before the call sends nothing
// (replylost.Unsent: no reply to lose).
func (s *Store) script(ctx context.Context, sc script, keys []string, args []any) ([]any, error) {
	if s.traced(ctx) {
		return s.tracedScript(ctx, sc, keys, args)
	}
	return s.sendScript(ctx, sc, keys, args)
}

// traced reports whether a decision script for ctx's call runs in a span
// of its own (script).
func (s *Store) traced(ctx context.Context) bool {
	return s.o.Tracer != nil && trace.SpanFromContext(ctx).IsRecording()
}

// coalescedHere returns the coalescer a decision script for ctx's call
// is sent on from its caller's goroutine (decisions.runHere): nil when
// the script is traced or not coalesced, and runs on a worker.
func (s *Store) coalescedHere(ctx context.Context) *coalescer {
	if s.traced(ctx) {
		return nil
	}
	return s.pipe.Load()
}

// sendScript is script, untraced.
func (s *Store) sendScript(ctx context.Context, sc script, keys []string, args []any) ([]any, error) {
	if err := ctx.Err(); err != nil {
		return nil, replylost.Unsent{Err: err}
	}
	p := s.pipe.Load()
	if p == nil {
		return run(ctx, s.rdb, sc, keys, args...)
	}
	return p.run(ctx, sc, keys, args)
}

// pipeAnswers reports whether the coalescer's pipeline answers a PING
// within ctx (true without one). A batch stuck on a connection to a
// stalled node holds every later batch (one is out at a time) until
// go-redis's read timeout, which a context does not shorten: a node is
// back for the decisions only once their pipeline answers too.
func (s *Store) pipeAnswers(ctx context.Context) bool {
	p := s.pipe.Load()
	if p == nil {
		return true
	}
	cmd := redis.NewCmd(ctx, "ping")
	return p.ap.Submit(ctx, cmd).WaitContext(ctx) == nil && cmd.Err() == nil
}
