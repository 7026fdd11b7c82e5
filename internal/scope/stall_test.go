package scope_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/scope"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
)

// TestParentReadInAStallEndsWithinTheDecisionBound: a child's Allow reads
// its parent before its own decision (no view is kept here, so every call
// reads it). With Redis stalled (a link that forwards nothing), that read
// and the child's decision share the daemon's one decision bound: the
// call ends with Redis judged failing, never at its caller's deadline,
// whether it read the parent itself or waited on another call's read.
func TestParentReadInAStallEndsWithinTheDecisionBound(t *testing.T) {
	testredis.StallTier(t)
	t.Parallel()
	b := testredis.Real(t)
	n := names{parent: b.Breaker("search-vendor"), web: b.Breaker("web_search"), news: b.Breaker("news_search")}
	px := testredis.NewProxy(t, b.Addr)
	// The daemon's options, but no read timeout of go-redis's own: only
	// the daemon's bound can end a read of the stalled link in time.
	daemonOptions := func(o *redis.Options) {
		o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled, o.ReadTimeout = 1, 1, true, -1
	}
	st := store.New(b.ClientVia(t, px.Addr(), daemonOptions), store.Options{Policies: policies(t, n, true, ""),
		Now: b.Clock(), Channel: b.Prefix + "events", DecisionTimeout: store.DefaultDecisionTimeout})
	t.Cleanup(st.Close)
	if err := st.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	sc := scope.New(st, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	px.Stall()
	defer px.Restore(t)

	const callers = 2 // the second may wait on the first's read of the parent
	errs := make(chan error, callers)
	for _, child := range []string{n.web, n.news} {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a caller far past the bound
			defer cancel()
			_, err := sc.Allow(ctx, child, "w1")
			if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
				err = errors.Join(errors.New("outlived its caller's deadline"), err)
			} else if !store.IsUnavailable(err) {
				err = errors.Join(errors.New("not judged as Redis failing"), err)
			} else {
				err = nil
			}
			errs <- err
		}()
	}
	for range callers {
		if err := <-errs; err != nil {
			t.Errorf("a child's Allow in the stall: %v", err)
		}
	}
}
