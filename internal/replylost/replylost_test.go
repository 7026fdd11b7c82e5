package replylost_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/replylost"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
)

// TestIndeterminate: only an error that may have followed a sent command
// with no reply back leaves it unknown whether the script ran.
func TestIndeterminate(t *testing.T) {
	t.Parallel()
	replied := errors.New("a malformed reply")
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{redis.ErrClosed, false},
		{redis.ErrPoolTimeout, false},
		{fmt.Errorf("allow: %w", redis.ErrClosed), false},
		{&net.OpError{Op: "dial", Err: errors.New("refused")}, false},
		{replylost.Unsent{Err: context.Canceled}, false},
		{fmt.Errorf("allow: %w", replied), false},
		{io.EOF, true},
		{&net.OpError{Op: "read", Err: errors.New("reset")}, true},
		{context.DeadlineExceeded, true},
		{replylost.StillQueued{Err: context.Canceled, Wait: func() {}}, true},
	} {
		if got := replylost.Indeterminate(c.err, replied); got != c.want {
			t.Errorf("Indeterminate(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestCallerLeft: a caller whose context ended while its script was out
// left; a script past the daemon's bound did not lose its caller.
func TestCallerLeft(t *testing.T) {
	t.Parallel()
	if !replylost.CallerLeft(fmt.Errorf("allow: %w", replylost.StillQueued{Err: context.Canceled, Wait: func() {}})) {
		t.Error("a canceled caller's queued script: not CallerLeft")
	}
	if replylost.CallerLeft(replylost.StillQueued{Err: errors.New("stalled"), Wait: func() {}}) {
		t.Error("a stalled script: CallerLeft")
	}
	if replylost.CallerLeft(context.Canceled) {
		t.Error("an error that is no StillQueued: CallerLeft")
	}
}

// TestSettleAllowAfterTheFirstEnded: a lost Allow still queued is
// settled only once its first script has ended, and once.
func TestSettleAllowAfterTheFirstEnded(t *testing.T) {
	t.Parallel()
	var s replylost.Settler
	first := make(chan struct{})
	var ended, settled atomic.Int32
	wait := func() { <-first; ended.Store(1) }
	s.Allow("b", "w", replylost.StillQueued{Err: context.Canceled, Wait: wait}, func(context.Context) (bool, error) {
		if ended.Load() == 0 {
			t.Error("settled before the first script ended")
		}
		settled.Add(1)
		return true, nil
	})
	if settled.Load() != 0 {
		t.Fatal("settled while the first script was out")
	}
	close(first)
	daemontest.Eventually(t, "the lost Allow settled", func() bool { return settled.Load() == 1 })
}
