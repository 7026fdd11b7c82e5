package breaker

import (
	"slices"
	"strconv"
	"strings"

	"github.com/breakerd/breakerd/internal/quorum"
)

// Slow calls (a policy's `slow_call`): a SUCCESS whose latency is more
// than Params.SlowCallMs is a slow call; a latency exactly at the limit
// is not slow. The latency is the worker's own measure of the call
// (RecordRequest.latency_ms, retries included).
//
// Consecutive mode, on a closed breaker (automatic, or pinned closed:
// counted, never tripped) and a current ticket:
//   - a slow success ends the failure run, as any success does (failures,
//     counted 429s, their workers, pause votes and a failure suspect), and
//     extends the slow run: State.Slow +1, its worker into State.SlowBy,
//     its latency into State.SlowLat (the last SlowSample slow latencies).
//   - a fast success ends both runs.
//   - a counted failure extends the failure run and leaves the slow run as
//     it is (a failure is no evidence that the vendor is fast); outcomes
//     that never count leave both.
//   - with Slow >= SlowCallThreshold, the slow run trips like a failure
//     run: open (CauseSlow) when its calls came from >= min_workers
//     distinct workers; when they all came from one worker, that worker
//     is a suspect (CauseSlowSuspect), denied for one cooldown.
//
// Window mode: the window also counts, per bucket, the slow calls and
// each slow worker's last slow bucket. After a slow success, with calls
// >= MinCalls and slow calls >= SlowCallRate * calls (exactly at the rate
// trips), the breaker opens (CauseSlow) when the window's slow calls came
// from >= min_workers workers, or flags the one worker behind them.
// Failures and slow calls are separate rates: a failure is a call, never
// a slow one; a slow success is a call, never a failure.
//
// Half-open: a probe that succeeds slowly is a failed probe (the vendor is
// still slow), with CauseProbeFailed.
//
// What is stored stays bounded: the slow run's count, its distinct
// workers (at most max(threshold, min_workers) outside a pin: the run
// trips once it has both), and the last SlowSample slow latencies, from
// which the reason's p50 is taken. On a slow trip or suspect, State.Last
// holds the measure (SlowMeasure), which Go renders in plain words.

// SlowSample is how many of the latest slow latencies a breaker keeps
// for its reason's p50.
const SlowSample = 16

// slow reports whether the call is a slow success under the policy.
func (st *step) slow() bool {
	return st.p.SlowCallMs > 0 && st.c.Evidence == quorum.Healthy && st.c.Latency > st.p.SlowCallMs
}

// pushSample appends ms to the sample, keeping the last SlowSample.
func pushSample(sample []int64, ms int64) []int64 {
	out := append(slices.Clone(sample), ms)
	if len(out) > SlowSample {
		out = out[len(out)-SlowSample:]
	}
	return out
}

// Median is the sample's lower median (p50), 0 for an empty sample.
func Median(sample []int64) int64 {
	if len(sample) == 0 {
		return 0
	}
	s := slices.Clone(sample)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// SlowMeasure is what a slow trip or suspect stores as State.Last: the
// slow calls counted, the window's calls (0 in consecutive mode), the
// p50 of the sample and its size, and the limit, all ms or counts:
// "slow:<slow>:<calls>:<p50>:<sample>:<limit>". The scripts build the
// same string; Go renders it (reason.go).
func SlowMeasure(slow, calls, p50, sample, limit int64) string {
	return "slow:" + strconv.FormatInt(slow, 10) + ":" + strconv.FormatInt(calls, 10) + ":" +
		strconv.FormatInt(p50, 10) + ":" + strconv.FormatInt(sample, 10) + ":" + strconv.FormatInt(limit, 10)
}

// slowMeasure is a parsed SlowMeasure.
type slowMeasure struct{ slow, calls, p50, sample, limit int64 }

// parseSlowMeasure reads a SlowMeasure; ok is false for anything else.
func parseSlowMeasure(s string) (m slowMeasure, ok bool) {
	if !strings.HasPrefix(s, "slow:") {
		return m, false // most lasts are not a measure: no split to make
	}
	parts := strings.Split(s, ":")
	if len(parts) != 6 || parts[0] != "slow" {
		return m, false
	}
	var n [5]int64
	for i, p := range parts[1:] {
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return m, false
		}
		n[i] = v
	}
	return slowMeasure{n[0], n[1], n[2], n[3], n[4]}, true
}

// slowRecord applies a slow success to a closed breaker in consecutive
// mode with a current ticket.
func (st *step) slowRecord() {
	s, c := &st.s, st.c
	s.Fails, s.RL, s.Last = 0, 0, ""
	s.Workers, s.RLWorkers, s.Pausers = nil, nil, nil
	if s.Cause != CauseSlowSuspect {
		s.Suspect, s.SuspectUntil = "", 0
	}
	s.Slow++
	s.SlowBy = addMember(s.SlowBy, c.Actor, st.p.Rule.Keep())
	s.SlowLat = pushSample(s.SlowLat, c.Latency)
	st.res.Wrote, st.res.Counted = true, true
	if s.Force == "closed" || st.p.SlowCallThreshold <= 0 || s.Slow < st.p.SlowCallThreshold {
		return
	}
	st.slowTrip(s.Slow, 0, s.SlowBy)
}

// slowTrip judges a slow run (or a window's slow calls) that reached its
// limit: open with min_workers distinct workers behind it, or flag the
// one worker behind it all.
func (st *step) slowTrip(slow, calls int64, workers []string) {
	s := &st.s
	last := SlowMeasure(slow, calls, Median(s.SlowLat), int64(len(s.SlowLat)), st.p.SlowCallMs)
	switch st.p.Rule.Reached(int64(len(workers))) {
	case quorum.TripCount:
		if st.capTrip(CauseSlow) {
			return
		}
		s.Fails, s.Workers, s.Last = slow, slices.Clone(workers), last
		st.trip(CauseSlow)
	case quorum.Suspect:
		s.Last, s.Cause = last, CauseSlowSuspect
		st.suspect(CauseSlowSuspect)
	}
}
