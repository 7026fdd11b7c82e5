package soak

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// The per-node rules: on a Redis Cluster each master is a node of its
// own, and a fault injected on one (its kill, its restart without
// persistence) must leave the breakers on the others answering from
// Redis; no daemon may flip a node between Redis and memory more often
// than the faults injected on it.

// SetMasters tells the observer which master held each breaker at the
// start (a Cluster): the per-node rules apply per master, and what a
// master's kill or restart loses is excused only for its own breakers.
// Without it the observer sees one node, "".
func (o *Observer) SetMasters(m map[string]string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.masters = m
}

// fault counts a fault injected on node at at.
func (o *Observer) fault(node string, at time.Time) {
	if o.faults == nil {
		o.faults, o.faultedAt, o.faultTimes = map[string]int{}, map[string]time.Time{}, map[string][]time.Time{}
	}
	o.faults[node]++
	o.faultTimes[node] = append(o.faultTimes[node], at)
	if _, ok := o.faultedAt[node]; !ok {
		o.faultedAt[node] = at
	}
}

// answered counts an answer for b that arrived at got and reports whether
// it was degraded (answered from a daemon's memory: left out of every
// other rule). On a Cluster an answer for a breaker whose master had no
// fault injected by then must come from Redis: a degraded one is kept
// for JudgeLive.
func (o *Observer) answered(b string, got time.Time, degraded bool) bool {
	if degraded {
		o.counts.Degraded++
	}
	if o.masters == nil {
		return degraded
	}
	node := o.masters[b]
	if at, ok := o.faultedAt[node]; ok && !got.Before(at) {
		return degraded
	}
	o.counts.LiveAnswers++
	if degraded {
		o.counts.LiveDegraded++
		o.live = append(o.live, liveAnswer{b, node, got})
	}
	return degraded
}

// liveAnswer is a degraded answer for breaker b, whose master node had
// no fault injected when it arrived at got.
type liveAnswer struct {
	b, node string
	got     time.Time
}

// JudgeLive flags each degraded answer on a master with no fault
// injected ("live-degraded"), unless the pulse saw that node or the host
// late just before it (late; see pulse.go): those are counted apart
// (LiveExcused).
func (o *Observer) JudgeLive(late Late) {
	o.mu.Lock()
	defer o.mu.Unlock()
	excuseOrFlag(o.live, func(a liveAnswer) bool { return late.excuses(a.node, a.got) }, &o.counts.LiveExcused, func(a liveAnswer) {
		o.flag("live-degraded", a.b, "answered from a daemon's memory at %s though its master %s had no fault injected, and answered the observer in time", stamp(a.got), a.node)
	})
	o.live = nil
}

// JudgeLosses flags each loss a daemon logged (losses: when, by breaker;
// daemon.LogStateLost) for a breaker whose master had no fault injected
// by then ("false-loss"): Redis kept that breaker's state, yet a daemon
// said it lost it (an alert, a metric, and a call denied that Redis let
// through).
func (o *Observer) JudgeLosses(losses map[string][]time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	names := make([]string, 0, len(losses))
	for b := range losses {
		names = append(names, b)
	}
	sort.Strings(names)
	for _, b := range names {
		node := o.masters[b]
		at, faulted := o.faultedAt[node]
		for _, t := range losses[b] {
			o.counts.Losses++
			if !faulted || t.Before(at) {
				o.counts.FalseLosses++
				o.flag("false-loss", b, "a daemon logged its state lost at %s, with no Redis fault injected on its master %q by then", stamp(t), node)
			}
		}
	}
}

// FlipKey is one daemon log's view of one Redis node ("" for a single
// Redis or Sentinel's master; on a Cluster, a master's address).
type FlipKey struct{ Log, Node string }

// CheckFlaps flags flapping: a daemon that sent a node's breakers to
// memory (flips: when, per daemon log and node) more than twice per fault
// injected on that node, plus one; a node with no fault injected must
// never go to memory. Flips past that limit that the pulse saw that node
// or the host late just before (late; see pulse.go) are counted apart
// (FlipsExcused), not flagged.
func (o *Observer) CheckFlaps(flips map[FlipKey][]time.Time, late Late) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range sortedFlips(flips) {
		n := o.faults[k.Node]
		limit := 0
		if n > 0 {
			limit = 2*n + 1
		}
		count, excused := len(flips[k]), 0
		for _, t := range flips[k] {
			if late.excuses(k.Node, t) {
				excused++
			}
		}
		switch {
		case count-excused > limit:
			o.flag("flapping", "", "%s: node %q went to memory %d times (%d with the observer answered in time), more than %d for %d Redis faults on it", k.Log, k.Node, count, count-excused, limit, n)
		case count > limit:
			o.counts.FlipsExcused += int64(count - limit)
		}
	}
}

func sortedFlips[V any](flips map[FlipKey]V) []FlipKey {
	keys := make([]FlipKey, 0, len(flips))
	for k := range flips {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Log != keys[j].Log {
			return keys[i].Log < keys[j].Log
		}
		return keys[i].Node < keys[j].Node
	})
	return keys
}

// FormatFlips renders flips for the report: "<log> <node>: n" each, with
// the faults injected per node.
func (o *Observer) FormatFlips(flips map[FlipKey]int) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var parts []string
	for _, k := range sortedFlips(flips) {
		node := k.Node
		if node == "" {
			node = "redis"
		}
		parts = append(parts, fmt.Sprintf("%s %s: %d (faults on it: %d)", k.Log, node, flips[k], o.faults[k.Node]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
