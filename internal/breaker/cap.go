package breaker

import "strconv"

// The open-fraction cap (a policy file's groups, like Envoy's
// max_ejection_percent): a breaker may belong to a group of breakers, and
// a trip that would leave more than the group's max_open_fraction of the
// group's members open is recorded and alerted (open_fraction_cap) but not
// enforced: the breaker stays closed. A fault in the breakers' own inputs
// (a bad deploy of the workers, a broken network on their side) then
// cannot darken a whole fleet's tools at once.
//
// The share is a share of the group's declared members (the policy file
// lists them by name: Params.GroupMembers), never of the breakers that
// happen to hold state: a healthy member counts though it holds none, and
// a name no group lists is in no group, so a worker cannot add members,
// nor open ones, by naming breakers. The group's index (store:
// brk:grp:{<group>}:open) holds its open members (Denies). A Record
// receives the count of the group's OTHER open members (Call.Group); the
// breaker tripping is not yet open, so the rule is:
//
//	capped  <=>  Open > 0  and  (Open+1) / Members > max_open_fraction
//
// in integers, with the fraction in millionths (Params.MaxOpenPPM):
// (Open+1) * 1e6 > MaxOpenPPM * Members. It reads nothing but the number
// of members open when the trip is judged, so the k-th member to open
// opens or not whatever the order in which the members' failures came:
// at most max(floor(max_open_fraction * Members), 1) members are open at
// once. The first trip in a group is never capped (Open = 0), whatever
// the fraction (Envoy ejects at least one host too); a trip that brings
// the open share to exactly max_open_fraction is not capped;
// max_open_fraction 1 never caps.

// The cause and the note of a capped trip.
const (
	// CauseOpenFractionCap: a trip stopped by the group's open-fraction
	// cap (the open_fraction_cap event).
	CauseOpenFractionCap Cause = "open_fraction_cap"
	// NoteCapped: the Record was counted, and the trip it made was
	// stopped by the group's cap: the breaker stays closed.
	NoteCapped Note = "open_fraction_capped"
)

// GroupCounts are a group's index as a Record sees it: the OTHER members
// of the breaker's group that are open (Denies). On a single Redis
// record.lua counts them itself, in the same atomic step as the trip; on
// a Cluster the daemon reads them just before the script (store,
// group.go).
type GroupCounts struct {
	Open int64
}

// PPM is how many millionths make a whole: Params.MaxOpenPPM is
// max_open_fraction times PPM.
const PPM = 1_000_000

// CapsTrip reports whether the group cap stops a trip when the group's
// other members stand at g (the rule above). With no group
// (MaxOpenPPM 0) it is false.
func (p Params) CapsTrip(g GroupCounts) bool {
	return p.MaxOpenPPM > 0 && g.Open > 0 && (g.Open+1)*PPM > p.MaxOpenPPM*p.GroupMembers
}

// Denies reports whether s counts as open in its group's index: open,
// half-open, paused or pinned open (every state that refuses the fleet's
// calls). A pin closed never counts.
func (s *State) Denies() bool {
	switch s.Force {
	case "open":
		return true
	case "closed":
		return false
	}
	return s.phase() != Closed
}

// Denying reports whether a public state name (State.Public) refuses the
// fleet's calls, as Denies says of a state: open, half_open, forced_open
// or paused.
func Denying(public string) bool {
	switch public {
	case "", string(Closed), "forced_closed":
		return false
	}
	return true
}

// OpenUntil is when s stops counting as open by itself, ms since the
// epoch: a pin open's end, or a pause's end (its entry in the group's open
// set is scored so, and lapses then even if no call rewrites the breaker);
// 0 when only a call ends it (the entry then lasts as long as the state).
func (s *State) OpenUntil() int64 {
	switch {
	case s.Force == "open":
		return s.ForceUntil
	case s.Force == "" && s.phase() == Paused:
		return s.PauseUntil
	}
	return 0
}

// OpenAt reports whether s counts as open in its group's index at now:
// it denies, and no pin or pause end (OpenUntil) has passed.
func (s *State) OpenAt(now int64) bool {
	u := s.OpenUntil()
	return s.Denies() && (u == 0 || u > now)
}

// capTrip applies the cap to a trip from closed about to happen for
// cause: true when it is capped, and then the breaker stays closed with
// its counts as they are (the caller returns at once). The first capped
// trip since the breaker's runs last ended (a fast success, or a
// transition) raises open_fraction_cap, its note "<cause>:<open>:<members>"
// (Open+1 of the group's members open had it tripped);
// later ones only answer NoteCapped.
func (st *step) capTrip(cause Cause) bool {
	g := st.c.Group
	if !st.p.CapsTrip(g) {
		return false
	}
	s := &st.s
	st.res.Counted, st.res.Note = true, NoteCapped
	if !s.Capped {
		s.Capped = true
		st.res.Wrote = true
		st.emit("open_fraction_cap", "closed", "closed", CauseOpenFractionCap, st.now)
		st.events[len(st.events)-1].Note = CapNote(cause, g, st.p.GroupMembers)
	}
	return true
}

// CapNote is an open_fraction_cap event's note: the trip's cause and the
// group's counts had it tripped, "trip:3:4" (3 of its 4 members open).
func CapNote(cause Cause, g GroupCounts, members int64) string {
	return string(cause) + ":" + strconv.FormatInt(g.Open+1, 10) + ":" + strconv.FormatInt(members, 10)
}
