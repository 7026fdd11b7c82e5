package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/events"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// stateView is a breaker's state as --json prints it: lower-case state
// names, numbers as numbers, every *_ms a duration in milliseconds and
// every *_at_ms milliseconds since the epoch on the Redis clock (0: none).
// In shadow mode state is the state enforced (closed), shadow_state the
// one the breaker would be in; shadow_setting is the operator's (on,
// off), absent when the breaker follows its policy.
type stateView struct {
	Breaker         string       `json:"breaker"`
	State           string       `json:"state"`
	Generation      int64        `json:"generation"`
	Failures        int64        `json:"failures"`
	DistinctWorkers int64        `json:"distinct_workers"`
	OpenedAtMs      int64        `json:"opened_at_ms"`
	NextProbeAtMs   int64        `json:"next_probe_at_ms"`
	CooldownMs      int64        `json:"cooldown_ms"`
	Reason          string       `json:"reason"`
	LastFailure     string       `json:"last_failure"`
	ProbeInFlight   bool         `json:"probe_in_flight"`
	FailedProbes    int64        `json:"failed_probes"`
	ForcedBy        string       `json:"forced_by"`
	ForcedUntilMs   int64        `json:"forced_until_ms"`
	Alternatives    []string     `json:"alternatives"`
	AsOfMs          int64        `json:"as_of_ms"`
	SuspectWorker   string       `json:"suspect_worker,omitempty"`
	SuspectUntilMs  int64        `json:"suspect_until_ms,omitempty"`
	WindowMode      bool         `json:"window_mode"`
	WindowCalls     int64        `json:"window_calls"`
	WindowFailures  int64        `json:"window_failures"`
	SlowCalls       int64        `json:"slow_calls"`
	SlowCallMs      int64        `json:"slow_call_ms"`
	Parent          string       `json:"parent,omitempty"`
	Shadow          bool         `json:"shadow,omitempty"`
	ShadowState     string       `json:"shadow_state,omitempty"`
	ShadowSetting   string       `json:"shadow_setting,omitempty"`
	LastEvent       *events.View `json:"last_event,omitempty"`
	*CapView
}

// CapView is the open-fraction cap's part of stateView: the breaker's
// group, its cap and counts, and whether a trip of this breaker was
// stopped by it (all present for a breaker in a group, zeros included;
// all absent for one in none).
type CapView struct {
	Group              string  `json:"group"`
	MaxOpenFraction    float64 `json:"max_open_fraction"`
	GroupMembers       int64   `json:"group_members"`
	GroupKnown         int64   `json:"group_known"`
	GroupOpen          int64   `json:"group_open"`
	OpenFractionCapped bool    `json:"open_fraction_capped"`
}

func viewState(s *pb.BreakerState) stateView {
	alts := s.GetAlternatives()
	if alts == nil {
		alts = []string{}
	}
	v := stateView{
		Breaker: s.GetBreaker(), State: breaker.EnumName(s.GetState()), Generation: s.GetGeneration(),
		Failures: s.GetFailures(), DistinctWorkers: s.GetDistinctWorkers(), OpenedAtMs: s.GetOpenedAtMs(),
		NextProbeAtMs: s.GetNextProbeAtMs(), CooldownMs: s.GetCooldownMs(), Reason: s.GetReason(),
		LastFailure: s.GetLastFailure(), ProbeInFlight: s.GetProbeInFlight(), FailedProbes: s.GetFailedProbes(),
		ForcedBy: s.GetForcedBy(), ForcedUntilMs: s.GetForcedUntilMs(), Alternatives: alts, AsOfMs: s.GetAsOfMs(),
		SuspectWorker: s.GetSuspectWorker(), SuspectUntilMs: s.GetSuspectUntilMs(),
		WindowMode: s.GetWindowMode(), WindowCalls: s.GetWindowCalls(), WindowFailures: s.GetWindowFailures(),
		SlowCalls: s.GetSlowCalls(), SlowCallMs: s.GetSlowCallMs(),
		Parent: s.GetParent(), Shadow: s.GetShadow(), ShadowSetting: shadowSettingName(s.GetShadowSetting()),
	}
	if s.GetGroup() != "" {
		v.CapView = &CapView{Group: s.GetGroup(), MaxOpenFraction: s.GetMaxOpenFraction(), GroupMembers: s.GetGroupMembers(), GroupKnown: s.GetGroupKnown(),
			GroupOpen: s.GetGroupOpen(), OpenFractionCapped: s.GetOpenFractionCapped()}
	}
	if s.GetShadow() {
		v.ShadowState = breaker.EnumName(s.GetShadowState())
	}
	return v
}

// shadowSettingName is an operator's shadow setting as breakerctl spells
// it (on, off); "" when the breaker follows its policy.
func shadowSettingName(s pb.ShadowSetting) string {
	switch s {
	case pb.ShadowSetting_SHADOW_SETTING_ON:
		return "on"
	case pb.ShadowSetting_SHADOW_SETTING_OFF:
		return "off"
	}
	return ""
}

// stateCell is a breaker's state as list and status print it: the state
// enforced, and in shadow mode the shadow state beside it
// ("closed (shadow: open)").
func stateCell(s *pb.BreakerState) string {
	if s.GetShadow() {
		return breaker.EnumName(s.GetState()) + " (shadow: " + breaker.EnumName(s.GetShadowState()) + ")"
	}
	return breaker.EnumName(s.GetState())
}

// kindCell is an event's kind as watch and events print it, marked when
// the breaker was in shadow mode ("transition (shadow)").
func kindCell(e *pb.Event) string {
	if e.GetShadow() {
		return breaker.EnumName(e.GetKind()) + " (shadow)"
	}
	return breaker.EnumName(e.GetKind())
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// stamp prints ms since the epoch as UTC time to the second; "-" for 0.
func stamp(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05Z")
}

// ago says how long before asOf the time at was ("1m30s ago"), or how
// long after ("in 28s"), both on the Redis clock; "-" for 0.
func ago(at, asOf int64) string {
	if at == 0 {
		return "-"
	}
	d := time.Duration(asOf-at) * time.Millisecond
	switch {
	case d > 0:
		return round(d) + " ago"
	case d < 0:
		return "in " + round(-d)
	}
	return "now"
}

// due is when a probe is due, beside asOf: "in 30s" ahead of it, "due"
// at or past it (the next Allow probes; "due for 1m25s" once a while
// has passed), "-" for none. A probe is not something that happened, so
// it never reads "ago".
func due(at, asOf int64) string {
	if at == 0 {
		return "-"
	}
	if d := time.Duration(at-asOf) * time.Millisecond; d > 0 {
		return "in " + round(d)
	}
	if d := time.Duration(asOf-at) * time.Millisecond; d >= time.Second {
		return "due for " + round(d)
	}
	return "due"
}

func round(d time.Duration) string {
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

func dur(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// arrow is an event's change of state ("closed -> open"), or the one state
// when it did not change.
func arrow(e *pb.Event) string {
	if e.GetFrom() == e.GetTo() {
		return breaker.EnumName(e.GetTo())
	}
	return fmt.Sprintf("%s -> %s", breaker.EnumName(e.GetFrom()), breaker.EnumName(e.GetTo()))
}

func writeCompactJSON(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }
