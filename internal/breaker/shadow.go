package breaker

import (
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Shadow mode (a policy's `shadow: true`, or an operator's setting per
// breaker, State.Shadow, which overrides the policy either way): the
// machine runs exactly as in enforced mode (trips, cooldowns, half-open,
// one probe lease, the growing cooldown, suspects, pauses), and every
// event it emits is marked Event.Shadow, but Allow always answers
// ALLOWED. The rules:
//
//   - A breaker shadows when it has no pin and its setting is "on", or
//     its setting is "" and the policy says shadow. A pin wins: forced
//     open denies, forced closed allows, and neither is shadowed.
//   - Allow computes the enforced decision (moving the machine as it
//     would: open -> half_open once the cooldown is over, the probe lease
//     to the first caller after it) and answers ALLOWED, with the
//     enforced decision in Result.ShadowDecision and no retry_after. The
//     shadow probe is therefore the first call after the cooldown: its
//     ticket carries the lease, so its Record settles the probe (closing
//     the shadow state, or opening it again for a longer cooldown).
//   - A call enforced mode would have denied (ShadowDecision a DENIED_*)
//     gets a ticket marked Ticket.Shadow. Enforced mode would not have
//     made the call, so its Record counts nothing, whatever the state
//     when it arrives: NoteShadowDenied. The other calls count exactly as
//     they would in enforced mode (an outcome on a shadow-open breaker is
//     NoteOpen, a non-holder's on a half-open one NoteNotLeaseHolder).
//   - An operator's Force with Mode "shadow" stores the setting ("on",
//     "off", "" for the policy), keeps the state machine as it is (a
//     shadow-open breaker turned "off" is open, enforced, at once; an
//     open one turned "on" keeps counting but allows), drops a probe
//     lease and bumps the generation, as every Force does. AUTO keeps the
//     setting. A stored setting keeps the breaker's keys (State.TTL
//     Persist) until the operator returns it to the policy.
//   - A policy reload that switches `shadow` likewise leaves the machine
//     as it is: enforcement starts from the state shadow mode reached.

// shadowing reports whether the breaker, as it stands in this step, is
// shadowed.
func (st *step) shadowing() bool { return Shadowing(st.s, st.p.Shadow) }

// Shadowing reports whether a breaker in state s under a policy whose
// shadow field is policyShadow is shadowed: no pin, and the operator's
// setting "on", or no setting and the policy's shadow.
func Shadowing(s State, policyShadow bool) bool {
	return s.Force == "" && ShadowOn(s.Shadow, policyShadow)
}

// ShadowOn resolves an operator's setting ("on", "off", "") against the
// policy's shadow field.
func ShadowOn(setting string, policyShadow bool) bool {
	return setting == "on" || setting == "" && policyShadow
}

// shadowAllow turns the enforced answer of an Allow on a shadowed breaker
// into ALLOWED, keeping the enforced one in ShadowDecision.
func (st *step) shadowAllow() {
	if !st.shadowing() || st.res.Decision == pb.Decision_DECISION_DENIED_PARENT_OPEN {
		// (A parent's denial is the parent's word, enforced: parent.go.)
		return
	}
	st.res.ShadowDecision = st.res.Decision
	st.res.Decision, st.res.RetryAfter = pb.Decision_DECISION_ALLOWED, 0
}

// setShadow applies an operator's shadow setting (Force, Mode "shadow").
func (st *step) setShadow() {
	s, c := &st.s, st.c
	from := s.Public()
	s.Shadow = c.Shadow
	s.Lease, s.LeaseUntil, s.LeaseBy = "", 0, ""
	s.Gen++
	st.res.Wrote = true
	st.emit("forced", from, s.Public(), CauseShadow, st.now)
	st.events[len(st.events)-1].Note = c.Reason
}

// ShadowDenied reports whether d, a shadow decision, is one enforced mode
// would have denied (the ticket is then marked Ticket.Shadow).
func ShadowDenied(d pb.Decision) bool {
	return d != pb.Decision_DECISION_UNSPECIFIED && d != pb.Decision_DECISION_ALLOWED && d != pb.Decision_DECISION_PROBE
}

// ShadowSettingOf maps a stored setting to the API's.
func ShadowSettingOf(setting string) pb.ShadowSetting {
	switch setting {
	case "on":
		return pb.ShadowSetting_SHADOW_SETTING_ON
	case "off":
		return pb.ShadowSetting_SHADOW_SETTING_OFF
	}
	return pb.ShadowSetting_SHADOW_SETTING_POLICY
}

// ShadowProto adds the shadow fields to st, a breaker's state as the
// machine (or the scripts) hold it, whose stored setting is setting and
// whose policy's shadow field is policyShadow: when shadowed, state
// becomes closed (the state enforced), shadow_state what the machine is
// in, and the reason says it is not enforced.
func ShadowProto(st *pb.BreakerState, setting string, policyShadow bool) {
	st.ShadowSetting = ShadowSettingOf(setting)
	forced := st.State == pb.State_STATE_FORCED_OPEN || st.State == pb.State_STATE_FORCED_CLOSED
	if forced || !ShadowOn(setting, policyShadow) {
		return
	}
	st.Shadow, st.ShadowState, st.DenyUntilMs, st.Denial, st.SuspectDenial = true, st.State, 0, nil, nil
	if st.State != pb.State_STATE_CLOSED && st.State != pb.State_STATE_UNSPECIFIED {
		st.Reason = ShadowPrefix + "would be " + EnumName(st.State) + ": " + st.Reason
	}
	st.State = pb.State_STATE_CLOSED
}

// ShadowPrefix starts every sentence about what a shadowed breaker would
// have done.
const ShadowPrefix = "shadow mode, not enforced: "
