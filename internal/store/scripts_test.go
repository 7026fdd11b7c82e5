package store_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
)

// TestScriptErrorsNameTheLuaLine: a Redis error inside a script names the
// .lua file and the line in it, not the line of the composed text
// Redis ran.
func TestScriptErrorsNameTheLuaLine(t *testing.T) {
	t.Parallel()
	line := func(file, needle string) int {
		src := map[string]string{"lib": store.LibLua, "record": store.RecordLua}[file]
		for i, l := range strings.Split(src, "\n") {
			if strings.Contains(l, needle) {
				return i + 1
			}
		}
		t.Fatalf("%s.lua has no line with %q", file, needle)
		return 0
	}
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		ctx := context.Background()
		name := b.Breaker("x")
		args := []any{b.Breaker("x"), 1, 1000, 10, 1000, b.Prefix + "ch", "w1",
			"F", 0, "", 0, "timeout", "not-a-number", 2, 3, 10000, 80000, "0", "0"}
		// The threshold (ARGV[13]) is not a number: the trip rule's
		// comparison fails in record.lua.
		_, err := store.RunRecordScript(ctx, b.Client, name, args...)
		want := fmt.Sprintf("record.lua:%d", line("record", "if s.fails >= THRESHOLD then q = quorum("))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("record with a bad threshold: %v; want an error naming %s", err, want)
		}
		if m := regexp.MustCompile(`user_script:\d+`).FindString(fmt.Sprint(err)); m != "" {
			t.Errorf("error still cites %s: %v", m, err)
		}
		// The pinned time (ARGV[2]) is not a number: clock() fails in lib.lua.
		// (threshold 1, quorum 1: the failure trips, which reads the clock)
		args[1], args[12], args[13] = "soon", 1, 1
		_, err = store.RunRecordScript(ctx, b.Client, name, args...)
		want = fmt.Sprintf("lib.lua:%d", line("lib", "if PINNED > 0 then"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("record with a bad pinned time: %v; want an error naming %s", err, want)
		}
		// The min workers (ARGV[14]) is not a number: KEEP's math.max fails
		// in record.lua's head, which runs before the rest of lib.lua.
		args[13] = "many"
		_, err = store.RunRecordScript(ctx, b.Client, name, args...)
		want = fmt.Sprintf("record.lua:%d", line("record", "local KEEP = math.max(MIN_WORKERS, 64)"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("record with a bad min workers: %v; want an error naming %s", err, want)
		}
	})
}

// TestScriptErrorsKeepOtherNumbers: a reply that is not a script error
// (a Cluster's MOVED names a host:port) is left as it is.
func TestScriptErrorsKeepOtherNumbers(t *testing.T) {
	t.Parallel()
	err := store.ScriptError(replyErr("MOVED 5969 127.0.0.1:20494"))
	if err.Error() != "MOVED 5969 127.0.0.1:20494" {
		t.Errorf("scriptError(MOVED) = %q, want it unchanged", err)
	}
}

// replyErr is an error reply from Redis (a redis.Error).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}
