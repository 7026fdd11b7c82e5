package store

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

var kinds = map[string]pb.EventKind{
	"transition":         pb.EventKind_EVENT_KIND_TRANSITION,
	"forced":             pb.EventKind_EVENT_KIND_FORCED,
	"credential_revoked": pb.EventKind_EVENT_KIND_CREDENTIAL_REVOKED,
	"stuck_open":         pb.EventKind_EVENT_KIND_STUCK_OPEN,
	"suspect_worker":     pb.EventKind_EVENT_KIND_SUSPECT_WORKER,
	"pause_expiring":     pb.EventKind_EVENT_KIND_PAUSE_EXPIRING,
	"probe_abandoned":    pb.EventKind_EVENT_KIND_PROBE_ABANDONED,
	"quota_exhausted":    pb.EventKind_EVENT_KIND_QUOTA_EXHAUSTED,
	"run_started":        pb.EventKind_EVENT_KIND_RUN_STARTED,
	"run_ended":          pb.EventKind_EVENT_KIND_RUN_ENDED,
	"open_fraction_cap":  pb.EventKind_EVENT_KIND_OPEN_FRACTION_CAP,
	"state_lost":         pb.EventKind_EVENT_KIND_STATE_LOST,
	"flapping":           pb.EventKind_EVENT_KIND_FLAPPING,
}

// IsNotice reports whether e is a run notice (EVENT_KIND_RUN_STARTED or
// EVENT_KIND_RUN_ENDED): published live by record.lua, never in the
// durable log, so it has no id. Observers of transitions (metrics, logs,
// the outage seeds, hooks) skip it.
func IsNotice(e *pb.Event) bool {
	k := e.GetKind()
	return k == pb.EventKind_EVENT_KIND_RUN_STARTED || k == pb.EventKind_EVENT_KIND_RUN_ENDED
}

// DecodeEvent parses one event as lib.lua's emit() publishes it: a JSON
// array of the stream entry's id followed by its field/value strings (a
// run notice, IsNotice, has an empty id: it is not logged). It
// decodes exactly as EventFromStream does, so a live event and its logged
// entry are the same event.
func DecodeEvent(b []byte) (*pb.Event, error) {
	var a []string
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("store: decode event: %w", err)
	}
	if len(a)%2 != 1 {
		return nil, fmt.Errorf("store: decode event: %d elements, want an id and field/value pairs", len(a))
	}
	values := make(map[string]any, len(a)/2)
	for i := 1; i < len(a); i += 2 {
		values[a[i]] = a[i+1]
	}
	return EventFromStream(redis.XMessage{ID: a[0], Values: values})
}

// SummaryMark is the alert mark (AlertQuota.Quiet) of the one alert a
// minute that hooks send for a caller past its alert quota: it carries
// how many of token's alerts hooks did not send since the previous
// summary, this one included. Stored in the entry's quiet field.
func SummaryMark(alerts int64, token string) string {
	return "summary:" + strconv.FormatInt(alerts, 10) + ":" + token
}

// ParseSummary reads a SummaryMark; ok is false for any other mark.
func ParseSummary(mark string) (alerts int64, token string, ok bool) {
	rest, found := strings.CutPrefix(mark, "summary:")
	if !found {
		return 0, "", false
	}
	n, token, found := strings.Cut(rest, ":")
	alerts, err := strconv.ParseInt(n, 10, 64)
	if !found || err != nil {
		return 0, "", false
	}
	return alerts, token, true
}
