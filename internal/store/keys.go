package store

import "strings"

// Prefix starts every key breakerd writes. Each breaker's keys wrap its name
// in a hash tag, brk:{<name>}:..., so that all of them share one Redis
// Cluster slot and every script touches a single slot.
const Prefix = "brk:"

// keys are the KEYS of every script, in the order lib.lua documents.
func keys(breaker string) []string {
	tag := Prefix + "{" + breaker + "}:"
	return []string{tag + "state", tag + "workers", tag + "events", tag + "rl", tag + "pause"}
}

// stateKeyPattern matches every breaker's state hash (for SCAN).
const stateKeyPattern = Prefix + "{*}:state"

// eventsKeyPattern matches every breaker's event stream (for SCAN).
const eventsKeyPattern = Prefix + "{*}:events"

// nameOf returns the breaker named in a key built by keys, or false.
func nameOf(key, suffix string) (string, bool) {
	if !strings.HasPrefix(key, Prefix+"{") || !strings.HasSuffix(key, "}:"+suffix) {
		return "", false
	}
	return key[len(Prefix)+1 : len(key)-len(suffix)-2], true
}
