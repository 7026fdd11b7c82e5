package store

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/lib.lua
	libLua string
	//go:embed scripts/allow.lua
	allowLua string
	//go:embed scripts/record.lua
	recordLua string
	//go:embed scripts/force.lua
	forceLua string
	//go:embed scripts/read.lua
	readLua string
	//go:embed scripts/recover.lua
	recoverLua string
	//go:embed scripts/check_lease.lua
	checkLeaseLua string
	//go:embed scripts/reserve.lua
	reserveLua string
	//go:embed scripts/group.lua
	groupLua string
	//go:embed scripts/target_lease.lua
	targetLeaseLua string
	//go:embed scripts/lost.lua
	lostLua string
)

// script is one breakerd script: lib.lua's shared prologue followed by the
// operation, fixed at init and loaded once (EVALSHA, with EVAL on
// NOSCRIPT).
type script struct {
	*redis.Script
	name     string // "allow", "record", "force", "read", "recover", "check_lease", "reserve", "group", "target_lease" or "lost"
	prologue int    // the lines lib.lua adds before the operation (0 for a script run alone)
	hash     any    // Hash(), put in an interface once for the coalescer's EVALSHA
}

func newScript(name, body string) script {
	return alone(name, libLua+body, prologueLines)
}

// alone is the script src named name, prologue lines of it lib.lua's.
func alone(name, src string, prologue int) script {
	sc := redis.NewScript(src)
	return script{Script: sc, name: name, prologue: prologue, hash: sc.Hash()}
}

var (
	allowScript  = newScript("allow", allowLua)
	recordScript = newScript("record", recordLua)
	forceScript  = newScript("force", forceLua)
	readScript   = newScript("read", readLua)
	// recoverScript and checkLeaseScript serve recovery checks (recovery.go).
	recoverScript    = newScript("recover", recoverLua)
	checkLeaseScript = newScript("check_lease", checkLeaseLua)
	// reserveScript serves the --max-breakers ceiling (internal/ceiling); it
	// runs alone, without lib.lua, on the live set's slot.
	reserveScript = alone("reserve", reserveLua, 0)
	// groupScript keeps a group's index on a Cluster (group.go); it runs
	// alone, on the group's slot.
	groupScript = alone("group", groupLua, 0)
	// targetLeaseScript bounds recovery checks per target (recovery.go);
	// it runs alone on the target's key.
	targetLeaseScript = alone("target_lease", targetLeaseLua, 0)
	// lostScript raises the state_lost alert (lost.go).
	lostScript = newScript("lost", lostLua)
	allScripts = []script{allowScript, recordScript, forceScript, readScript, recoverScript, checkLeaseScript, reserveScript, groupScript, targetLeaseScript, lostScript}
)

// scriptNames names each script by its SHA1, for metrics (ScriptName).
var scriptNames = func() map[string]string {
	m := map[string]string{}
	for _, sc := range allScripts {
		m[sc.Hash()] = sc.name
	}
	return m
}()

// ScriptName returns the name (script.name) of the breakerd script whose
// SHA1 is sha, or "" for any other.
func ScriptName(sha string) string { return scriptNames[sha] }

// run executes sc (EVALSHA, then EVAL on NOSCRIPT) and returns its array
// reply; a script error names the .lua file and line it comes from.
func run(ctx context.Context, c redis.Scripter, sc script, keys []string, args ...any) ([]any, error) {
	res, err := sc.Run(ctx, c, keys, args...).Slice()
	if err != nil {
		return nil, scriptError(sc, err)
	}
	return res, nil
}

// evalFunc queues one script call in a pipeline (see pipelined).
type evalFunc func(sc script, keys []string, args ...any) *redis.Cmd

// pipelined sends the script calls fill queues in one pipelined round
// trip, by EVALSHA, and once more by EVAL when Redis had not loaded one of
// them (NOSCRIPT: a flushed or new server). fill may queue other commands
// on p too; it is called again for the second try, so it must only queue.
// The error is the pipeline's first (go-redis Pipelined).
func pipelined(ctx context.Context, c redis.Cmdable, fill func(p redis.Pipeliner, eval evalFunc)) error {
	try := func(sha bool) error {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			fill(p, func(sc script, keys []string, args ...any) *redis.Cmd {
				if sha {
					return sc.EvalSha(ctx, p, keys, args...)
				}
				return sc.Eval(ctx, p, keys, args...)
			})
			return nil
		})
		return err
	}
	err := try(true)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		err = try(false)
	}
	return err
}

// prologueLines is how many lines lib.lua adds before each operation.
var prologueLines = strings.Count(libLua, "\n")

// lineRef matches where Redis ("user_script:N") and miniredis (" :N:")
// place an error in a script's text, and nothing else (not the port in a
// MOVED 5969 127.0.0.1:7000 reply).
var lineRef = regexp.MustCompile(`(user_script|\s):(\d+)\b`)

// scriptError rewrites the script line numbers in a Redis error so they
// point into the .lua file they come from: the text Redis runs is lib.lua
// followed by the operation, so line N past the prologue is line
// N-prologueLines of <name>.lua. The error keeps its type (redis.Error
// prefixes such as NOSCRIPT still match).
func scriptError(sc script, err error) error {
	var re redis.Error
	if !errors.As(err, &re) || !lineRef.MatchString(err.Error()) {
		return err
	}
	msg := lineRef.ReplaceAllStringFunc(err.Error(), func(m string) string {
		n, _ := strconv.Atoi(lineRef.FindStringSubmatch(m)[2])
		lead := ""
		if !strings.HasPrefix(m, "user_script") {
			lead = m[:1] // the white space before miniredis's ":N"
		}
		if n > sc.prologue {
			return fmt.Sprintf("%s%s.lua:%d", lead, sc.name, n-sc.prologue)
		}
		return fmt.Sprintf("%slib.lua:%d", lead, n)
	})
	return scriptErr{msg: msg, cause: err}
}

// scriptErr is a script's Redis error with its lines mapped to the .lua
// files. It is a redis.Error, and unwraps to the original.
type scriptErr struct {
	msg   string
	cause error
}

func (e scriptErr) Error() string { return e.msg }
func (e scriptErr) RedisError()   {}
func (e scriptErr) Unwrap() error { return e.cause }
