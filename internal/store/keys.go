package store

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strings"
)

// Prefix starts every key breakerd writes for a breaker.
const Prefix = "brk:"

// hookPrefix starts the keys of the webhook dispatcher (internal/hooks).
const hookPrefix = "breakerd:hooks:"

// Keys are the Redis keys of one breaker. All of them hash to one Redis
// Cluster slot, so every script touches a single slot.
//
// The encoding (docs/concepts.md, "Keys"):
//
//   - A name that does not start with "}" is wrapped in a hash tag:
//     brk:{<name>}:state, brk:{<name>}:workers, brk:{<name>}:events,
//     brk:{<name>}:rl, brk:{<name>}:pause, brk:{<name>}:win,
//     brk:{<name>}:check, brk:{<name>}:rec.
//     Redis Cluster hashes the text between the first "{" and the first "}"
//     after it (redis.io, "Cluster specification", hash tags): the whole name
//     when it has no "}", else the part before its first "}". Either way the
//     three keys share it.
//   - A name that starts with "}" would leave that tag empty, and Redis
//     would hash each whole key to a different slot (CROSSSLOT). Such a name
//     is tagged with the FNV-1a 32-bit hash of the name, in 8 lower-case hex
//     digits: brk:#{<hash>}<name>:state, and so on. The "#" keeps these keys
//     apart from the first form.
//
// Names that do not start with "}" keep the keys they had before this
// encoding; docs/operations.md ("Migration") says what to do about the
// old keys of names that start with "}".
type Keys struct {
	// State is the breaker's state hash.
	State string
	// Workers is the set of distinct workers in the current failure run.
	Workers string
	// Events is the breaker's durable event stream.
	Events string
	// RL is the set of distinct workers behind the run's counted 429s.
	RL string
	// Pause is the set of distinct workers whose working credential was
	// rejected (votes to pause).
	Pause string
	// Window is the failure-rate window's hash (window mode only).
	Window string
	// Check is the recovery check lease: which daemon runs the breaker's
	// recovery check, until when (check_lease.lua).
	Check string
	// Records remembers, briefly, what the breaker's recent Records
	// answered, by their ids (record.lua; internal/replylost).
	Records string
}

// KeysOf returns breaker's keys. It is the one place breakerd builds them.
func KeysOf(breaker string) Keys {
	var tag string
	if strings.HasPrefix(breaker, "}") {
		tag = fmt.Sprintf("%s#{%08x}%s:", Prefix, fnv32a(breaker), breaker)
	} else {
		tag = Prefix + "{" + breaker + "}:"
	}
	// Every key is a piece of one string: one allocation per call
	// instead of one per key, on every Allow and Record.
	suffixes := [...]string{"state", "workers", "events", "rl", "pause", "win", "check", "rec"}
	var b strings.Builder
	b.Grow(len(suffixes)*len(tag) + 36)
	var ends [len(suffixes)]int
	for i, sfx := range suffixes {
		b.WriteString(tag)
		b.WriteString(sfx)
		ends[i] = b.Len()
	}
	all := b.String()
	var k [len(suffixes)]string
	for i, start := 0, 0; i < len(ends); i++ {
		k[i], start = all[start:ends[i]], ends[i]
	}
	return Keys{State: k[0], Workers: k[1], Events: k[2], RL: k[3], Pause: k[4], Window: k[5], Check: k[6], Records: k[7]}
}

// list returns the keys as the KEYS of every script, in the order lib.lua
// documents: state, workers, events, rl, pause, win; with room for the
// three a script may add (scriptKeys, recordKeys), so that adding them does
// not copy the slice.
func (k Keys) list() []string {
	return append(make([]string, 0, 9), k.State, k.Workers, k.Events, k.RL, k.Pause, k.Window)
}

// keys is KeysOf(breaker).list().
func keys(breaker string) []string { return KeysOf(breaker).list() }

func fnv32a(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

// stateKeyPattern matches every breaker's state hash, in both forms (for
// SCAN; nameOf rejects the few other keys it may match).
const stateKeyPattern = Prefix + "*:state"

// eventsKeyPattern matches every breaker's event stream (for SCAN).
const eventsKeyPattern = Prefix + "*:events"

// nameOf returns the breaker whose key (built by KeysOf) with the given
// suffix ("state", "events") key is, or false for any other key, including
// the keys a name starting with "}" had before the hashed form.
func nameOf(key, suffix string) (string, bool) {
	if strings.HasPrefix(key, Prefix+"{") && strings.HasSuffix(key, "}:"+suffix) {
		name := key[len(Prefix)+1 : len(key)-len(suffix)-2]
		if name == "" || strings.HasPrefix(name, "}") {
			return "", false
		}
		return name, true
	}
	// brk:#{xxxxxxxx}<name>:<suffix>
	head := len(Prefix) + len("#{xxxxxxxx}")
	if len(key) <= head+len(suffix)+1 || !strings.HasPrefix(key, Prefix+"#{") || !strings.HasSuffix(key, ":"+suffix) {
		return "", false
	}
	name := key[head : len(key)-len(suffix)-1]
	if KeysOf(name).State != key[:len(key)-len(suffix)]+"state" {
		return "", false
	}
	return name, true
}

// KeyPatterns returns SCAN MATCH patterns that together match every key
// of every breaker whose name starts with namePrefix (all breakers when it
// is empty), and of every webhook whose name starts with it. They may match
// a few other keys under the same prefixes. Tests use it to clean up.
func KeyPatterns(namePrefix string) []string {
	p := globEscape(namePrefix)
	out := []string{hookPrefix + p + "*"}
	if namePrefix == "" || strings.HasPrefix(namePrefix, "}") {
		out = append(out, Prefix+"#{*}"+p+"*")
	}
	if !strings.HasPrefix(namePrefix, "}") {
		out = append(out, Prefix+"{"+p+"*")
	}
	return out
}

// HookSinceKey returns the key that holds when webhook hook was first
// configured anywhere in the fleet: breakerd:hooks:<hook>:since.
func HookSinceKey(hook string) string { return hookPrefix + hook + ":since" }

// TargetKey is the recovery-check lease of one check target,
// brk:check-target:<hex SHA-256 of the target>: the target may hold
// credentials, so only its digest is stored.
func TargetKey(target string) string {
	sum := sha256.Sum256([]byte(target))
	return Prefix + "check-target:" + hex.EncodeToString(sum[:])
}

// globEscape escapes the characters SCAN MATCH treats as patterns.
func globEscape(s string) string {
	var out strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			out.WriteByte('\\')
		}
		out.WriteRune(r)
	}
	return out.String()
}
