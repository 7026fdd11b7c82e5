package client

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// jargon is what no text a model reads may hold: a worker's id, quorum
// words, an invitation to ask again.
var jargon = regexp.MustCompile(`\bw\d\b|\d+ workers?\b|quorum|confirms|ask again|circuit stays closed`)

// A suspect worker's run loses the tool with breakerd's words for it:
// this worker's own problem, status worker_isolated, never empty and
// never circuit_open, in Available's notice and in a call's denial.
func TestSuspectDenialIsThisWorkersProblem(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testSuspectDenialIsThisWorkersProblem(t, m) })
}

func testSuspectDenialIsThisWorkersProblem(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, store.Options{})
		w1 := m.dial(t, d.Addr, "w1", WithClock(m.clk))
		ctx := context.Background()
		v := newVendor(t, 503)
		name := b.Breaker("crm")
		for range 5 {
			_ = w1.Call(ctx, name, v.call)
		}
		m.settle(t, d, name, w1)
		run := NewRun(w1)
		tools := []Tool{{Name: "crm_lookup", Breaker: name}}
		if got, err := run.Available(ctx, tools); err != nil || len(got) != 0 {
			t.Fatalf("the suspect's Available = %v, %v; want crm_lookup gone", names(got), err)
		}
		u := run.Degraded()[0]
		notice := run.Notice()
		if u.Status != StatusWorkerIsolated || u.Reason == "" || !strings.Contains(u.Reason, "this worker") ||
			!strings.Contains(notice, "- crm_lookup: "+u.Reason+". It may be back in about") ||
			jargon.MatchString(notice) || strings.Contains(notice, name) {
			t.Errorf("removed %+v, notice:\n%s\nwant worker_isolated with breakerd's words, no name, no jargon", u, notice)
		}
		err := w1.Call(ctx, name, v.call)
		den, ok := AsDenial(err, "crm_lookup")
		if !ok || den.Status != StatusWorkerIsolated || den.Scope != "worker" || den.Reason != u.Reason ||
			strings.Contains(string(den.JSON()), "circuit_open") || jargon.Match(den.JSON()) {
			t.Errorf("the suspect's call: %v, JSON %s; want worker_isolated, scope worker, the same words", err, den.JSON())
		}
	})
}

// A probe in flight removes the tool for the run without inviting a
// retry, without the lease as a wait, and with the probe's own words,
// not the failures of the state before it; in Available and in a call.
func TestProbeInFlightDenialInvitesNoRetry(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testProbeInFlightDenialInvitesNoRetry(t, m) })
}

func testProbeInFlightDenialInvitesNoRetry(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, withAlternatives())
		w1, w2 := m.dial(t, d.Addr, "w1", WithClock(m.clk)), m.dial(t, d.Addr, "w2", WithClock(m.clk))
		name := b.Breaker("search")
		trip(t, w1, w2, name)
		m.settle(t, d, name, w1, w2)
		m.advance(b, 31*time.Second)
		ctx := context.Background()
		if p, err := w1.Allow(ctx, name); err != nil || p.Decision != pb.Decision_DECISION_PROBE {
			t.Fatalf("after the cooldown: %v, %v; want PROBE", p, err)
		}
		m.settle(t, d, name, w2)
		tools := []Tool{{Name: "web_search", Breaker: name}}
		run := NewRun(w2)
		if got, err := run.Available(ctx, tools); err != nil || len(got) != 0 {
			t.Fatalf("Available during the probe = %v, %v; want web_search gone", names(got), err)
		}
		u := run.Degraded()[0]
		notice := run.Notice()
		if u.Status != StatusProbeInFlight || !u.MayReturnAt.IsZero() || strings.Contains(u.Reason, "fail") && !strings.HasPrefix(u.Reason, "it failed and is being tested") ||
			strings.Contains(u.Reason, "last") || !strings.Contains(notice, "It will not come back during this task.") ||
			strings.Contains(notice, "may be back") || jargon.MatchString(notice) {
			t.Errorf("removed %+v, notice:\n%s\nwant the probe's words, no return time, no invitation", u, notice)
		}
		err := NewRun(w2).Call(ctx, tools[0], func(context.Context) error { return nil })
		den, ok := AsDenial(err, "web_search")
		if !ok || den.Status != StatusProbeInFlight || den.Reason != u.Reason || !den.MayReturnAt.IsZero() ||
			!strings.Contains(string(den.JSON()), `"may_return_in_ms":0,`) || jargon.Match(den.JSON()) {
			t.Errorf("a call during the probe: %v, JSON %s; want the probe's words with no wait", err, den.JSON())
		}
	})
}

// A forced breaker's denials in a run are breakerd's words both times:
// the first from breakerd, the second from the run's memory, byte for
// byte, the operator's prefix included.
func TestForcedDenialIsTheSameFromTheRunsMemory(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testForcedDenialIsTheSameFromTheRunsMemory(t, m) })
}

func testForcedDenialIsTheSameFromTheRunsMemory(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, store.Options{})
		name := b.Breaker("payments")
		op := dial(t, d.Addr, "op")
		force(t, op, name, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance")
		for _, opts := range [][]Option{{WithClock(m.clk)}, {WithClock(m.clk), WithOpenCache()}} {
			agent := m.dial(t, d.Addr, "agent", opts...)
			run := NewRun(agent)
			tool := Tool{Name: "refund_charge", Breaker: name}
			var texts []string
			for range 2 {
				err := run.Call(context.Background(), tool, func(context.Context) error { return nil })
				var open *CircuitOpenError
				den, ok := AsDenial(err, tool.Name)
				if !ok || !errors.As(err, &open) || !open.Forced || den.Status != StatusForcedOpen ||
					den.Reason != "forced open by an operator: vendor maintenance" {
					t.Fatalf("a call on a forced breaker: %v (%+v), want forced_open with the operator's words", err, den)
				}
				texts = append(texts, string(den.JSON()))
			}
			if texts[0] != texts[1] {
				t.Errorf("the run's second denial differs from its first:\n%s\n%s", texts[0], texts[1])
			}
			if n := run.Notice(); !strings.Contains(n, "- refund_charge: forced open by an operator: vendor maintenance. No return time is known.") {
				t.Errorf("notice %q", n)
			}
		}
	})
}

// TestClientWordsNoDenial: the client's own code holds no words for a
// model beyond the conformance templates and fallback_denials.json:
// breakerd words every denial.
func TestClientWordsNoDenial(t *testing.T) {
	t.Parallel()
	words := regexp.MustCompile(`being probed|being tested|forced open by an operator|ask again|no other worker|is paused|is open"|circuit stays`)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			code, _, _ := strings.Cut(line, "//")
			if words.MatchString(code) {
				t.Errorf("%s words a denial itself: %s", f, strings.TrimSpace(line))
			}
		}
	}
}
