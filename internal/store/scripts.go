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

// script is one breakerd script, fixed at init and loaded once (EVALSHA,
// with EVAL on NOSCRIPT). Its text is made of parts of .lua files
// (newScript, alone).
type script struct {
	*redis.Script
	name  string // "allow", "record", "force", "read", "recover", "check_lease", "reserve", "group", "target_lease" or "lost"
	parts []part // the text's pieces, in order
	hash  any    // Hash(), put in an interface once for the coalescer's EVALSHA
}

// part is a piece of a script's text: lines of file from its line first.
type part struct {
	file         string
	first, lines int
}

// headEnd begins the line that ends lib.lua's head, and an operation's
// head when it has one (lib.lua states the order).
const headEnd = "-- ===="

// newScript composes the script of the operation name, body its .lua
// text, with lib.lua: lib.lua's head, the operation's head, the rest of
// lib.lua, the rest of the operation. An operation with no head line has
// an empty head: lib.lua, then the operation.
func newScript(name, body string) script {
	libHead, libTail, ok := cutHead(libLua)
	if !ok {
		panic("store: lib.lua has no " + headEnd + " line")
	}
	opHead, opTail, _ := cutHead(body) // no head line: the whole body follows lib.lua
	var parts []part
	add := func(file, text string, first int) {
		if text != "" {
			parts = append(parts, part{file: file, first: first, lines: strings.Count(text, "\n")})
		}
	}
	add("lib", libHead, 1)
	add(name, opHead, 1)
	add("lib", libTail, 1+strings.Count(libHead, "\n"))
	add(name, opTail, 1+strings.Count(opHead, "\n"))
	return compose(name, libHead+opHead+libTail+opTail, parts)
}

// cutHead cuts text at the start of its headEnd line: the head before it,
// the rest from it. Without one, the head is empty and ok false.
func cutHead(text string) (head, tail string, ok bool) {
	i := strings.Index(text, "\n"+headEnd)
	if i < 0 {
		return "", text, false
	}
	return text[:i+1], text[i+1:], true
}

// alone is the script src named name, run without lib.lua.
func alone(name, src string) script {
	return compose(name, src, []part{{file: name, first: 1, lines: strings.Count(src, "\n")}})
}

// compose is the script named name whose text src is made of parts.
func compose(name, src string, parts []part) script {
	sc := redis.NewScript(src)
	return script{Script: sc, name: name, parts: parts, hash: sc.Hash()}
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
	reserveScript = alone("reserve", reserveLua)
	// groupScript keeps a group's index on a Cluster (group.go); it runs
	// alone, on the group's slot.
	groupScript = alone("group", groupLua)
	// targetLeaseScript bounds recovery checks per target (recovery.go);
	// it runs alone on the target's key.
	targetLeaseScript = alone("target_lease", targetLeaseLua)
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

// lineRef matches where Redis ("user_script:N") and miniredis (" :N:")
// place an error in a script's text, and nothing else (not the port in a
// MOVED 5969 127.0.0.1:7000 reply).
var lineRef = regexp.MustCompile(`(user_script|\s):(\d+)\b`)

// scriptError rewrites the script line numbers in a Redis error so they
// point into the .lua files the script's text is made of (newScript). The
// error keeps its type (redis.Error prefixes such as NOSCRIPT still
// match).
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
		return lead + sc.line(n)
	})
	return scriptErr{msg: msg, cause: err}
}

// line names line n of sc's text as "<file>.lua:<line>".
func (sc script) line(n int) string {
	for i, p := range sc.parts {
		if n <= p.lines || i == len(sc.parts)-1 { // the last part holds any line past the end
			return fmt.Sprintf("%s.lua:%d", p.file, p.first+n-1)
		}
		n -= p.lines
	}
	return sc.name + ".lua" // no parts: not a script newScript or alone made
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
