package daemon

import (
	"fmt"
	"strings"

	"github.com/breakerd/breakerd/internal/store"
)

// RedisACLCommands are the commands breakerd runs, each as Redis's ACL
// names it (a subcommand after "|"), and why. A script's commands count:
// Redis checks what a script calls against the caller's ACL. Adding a
// Redis call to breakerd means adding it here; TestRedisACL runs the
// daemon under exactly this list and fails on anything missing.
var RedisACLCommands = []struct{ Name, Why string }{
	{"ping", "health checks, and go-redis's pub/sub keepalive"},
	{"script|load", "loading the scripts at startup and on every health check"},
	{"script|exists", "the health check: which scripts Redis still has (after a restart, a SCRIPT FLUSH or a failover)"},
	{"evalsha", "every decision (allow, record, force, read), recovery check (check_lease, recover), --max-breakers admission (reserve), open-fraction group index (group) and state_lost alert (lost)"},
	{"eval", "the same, when Redis lost the script (NOSCRIPT)"},
	{"time", "the scripts and the hooks read Redis's clock"},
	{"info", "at start and when Redis comes back: whether it may evict breakerd's keys or lost them in a restart (maxmemory-policy, AOF, run_id)"},
	{"hgetall", "script: a breaker's state, and its recovery check lease"},
	{"hset", "script: a breaker's state, and its recovery check lease"},
	{"del", "script: a breaker's workers set and probe lease"},
	{"sadd", "script: the distinct workers of a failure run"},
	{"scard", "script: counting those workers"},
	{"pexpire", "script: keys expire when idle (the check lease too)"},
	{"persist", "script: a forced state does not expire"},
	{"xadd", "script: the durable event log"},
	{"publish", "script: the live event feed"},
	{"subscribe", "the live event feed (Watch, metrics, logs, hooks)"},
	{"scan", "List, and the hooks' sweep of event streams"},
	{"exists", "the new-breaker quota, and a client's savings report: does a breaker hold state"},
	{"xrevrange", "Events: the durable event log"},
	{"xrange", "GET /v1/watch: replaying a breaker's events after Last-Event-ID"},
	{"xlen", "GET /v1/watch: whether a breaker's log was trimmed past Last-Event-ID"},
	{"zadd", "--max-breakers: reserving and registering a live breaker; scripts: a group's index (open-fraction cap); savings: the savings index"},
	{"zremrangebyscore", "--max-breakers: pruning expired breakers from the count; scripts: the same in a group's index; savings: the same in the savings index"},
	{"zcard", "--max-breakers: counting live breakers; scripts: counting a group's known and open breakers"},
	{"zscore", "--max-breakers: script (reserve): is a breaker counted already; scripts: is it in its group's index"},
	{"zrem", "scripts: a breaker leaving its group's open set or index (open-fraction cap)"},
	{"set", "hooks: when a hook was first configured (SET NX EX)"},
	{"get", "hooks: reading that time"},
	{"expire", "hooks: keeping that time alive; savings: each bucket's retention"},
	{"hincrby", "savings: adding a breaker's counts to its minute and hour buckets"},
	{"hmget", "Savings: reading the buckets of a window"},
	{"zrangebyscore", "Savings: the breakers that saved anything in a window (the savings index)"},
	{"xgroup|create", "hooks: one consumer group per hook and stream"},
	{"xreadgroup", "hooks: reading events to deliver"},
	{"xautoclaim", "hooks: taking over a dead daemon's deliveries"},
	{"xpending", "hooks: checking a delivery is still ours"},
	{"xclaim", "hooks: keeping a long delivery ours"},
	{"xack", "hooks: a delivered event"},
}

// RedisACLKeys are the key patterns breakerd touches, and RedisACLChannels
// its pub/sub channels.
var (
	RedisACLKeys     = []string{store.Prefix + "*", "breakerd:hooks:*"}
	RedisACLChannels = []string{store.DefaultChannel + "*"}
)

// RedisACLRules returns the ACL SETUSER rules (after the user's name and
// password) for breakerd's user: its keys, its channels and exactly its
// commands, plus SELECT when it uses a database other than 0.
func RedisACLRules(db int) string {
	rules := []string{"resetkeys"}
	for _, k := range RedisACLKeys {
		rules = append(rules, "~"+k)
	}
	rules = append(rules, "resetchannels")
	for _, c := range RedisACLChannels {
		rules = append(rules, "&"+c)
	}
	rules = append(rules, "-@all")
	for _, c := range RedisACLCommands {
		rules = append(rules, "+"+c.Name)
	}
	if db != 0 {
		rules = append(rules, "+select")
	}
	return strings.Join(rules, " ")
}

// RedisACLSetUser returns the redis-cli command that creates (or resets)
// user with password and breakerd's rules for database db.
func RedisACLSetUser(user, password string, db int) string {
	return fmt.Sprintf("ACL SETUSER %s reset on >%s %s", user, password, RedisACLRules(db))
}
