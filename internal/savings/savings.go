// Package savings owns what breakerd counts as saved: the calls to a
// breaker's dependency that were not made (docs/operations.md, "What the
// breakers saved"). It holds the counts' meaning (Counts), their buckets
// in Redis (a minute's and an hour's per breaker, in the breaker's hash
// tag, with an index of the breakers that saved anything), the daemon's
// own denials held in memory until a flush (Index.CountDenial), the
// clients' reports (Index.Report) and the reads over a window
// (Index.Read, Index.Between). The store builds the daemon's Index; the
// server, the hooks and the metrics call it.
//
// Everything here is an estimate: a refused call may have been retried
// later, or never have been made.
package savings

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The buckets' lifetimes. Every count goes into two buckets of its
// breaker, the minute's and the hour's; a read takes minutes for a window
// up to MinuteRetention and hours beyond.
const (
	// MinuteRetention is how long a minute bucket is kept.
	MinuteRetention = 3 * time.Hour
	// HourRetention is how long an hour bucket is kept: the longest
	// window, rounded out to whole hours, and an hour more.
	HourRetention = MaxWindow + 2*time.Hour
	// MaxWindow is the longest window a savings read takes.
	MaxWindow = 7 * 24 * time.Hour
)

// The fields of a savings bucket, one per way a call was not made.
const (
	fieldDenied  = "denied"
	fieldLocal   = "local"
	fieldRemoved = "removed"
)

// Counts are calls to a breaker's dependency that were not made.
type Counts struct {
	// DaemonDenials are Allow calls a daemon denied.
	DaemonDenials int64
	// ClientDenials are calls refused in a client's own process (fast
	// mode, the open cache), as the clients reported them.
	ClientDenials int64
	// ToolsRemoved are runs that went without the breaker's tool, from
	// their start or from a denial on (one per run and tool), as the
	// clients reported them.
	ToolsRemoved int64
}

// Calls is the number of calls not made: the sum of the counts.
func (c Counts) Calls() int64 { return c.DaemonDenials + c.ClientDenials + c.ToolsRemoved }

func (c Counts) add(o Counts) Counts {
	return Counts{c.DaemonDenials + o.DaemonDenials, c.ClientDenials + o.ClientDenials, c.ToolsRemoved + o.ToolsRemoved}
}

// fields are c as a bucket's fields, leaving out the zeros.
func (c Counts) fields() map[string]int64 {
	out := map[string]int64{}
	for f, n := range map[string]int64{fieldDenied: c.DaemonDenials, fieldLocal: c.ClientDenials, fieldRemoved: c.ToolsRemoved} {
		if n != 0 {
			out[f] = n
		}
	}
	return out
}

// countsOf decodes one bucket's HMGET reply (denied, local, removed; nil
// for a field or bucket that holds none).
func countsOf(vals []any) (Counts, error) {
	var n [3]int64
	for i, v := range vals {
		if v == nil || i >= len(n) {
			continue
		}
		str, ok := v.(string)
		if !ok {
			return Counts{}, fmt.Errorf("savings: malformed bucket field %T", v)
		}
		x, err := strconv.ParseInt(str, 10, 64)
		if err != nil {
			return Counts{}, fmt.Errorf("savings: malformed bucket field %q", str)
		}
		n[i] = x
	}
	return Counts{DaemonDenials: n[0], ClientDenials: n[1], ToolsRemoved: n[2]}, nil
}

// Window is the span a savings read covers, ms since the epoch: From
// inclusive, To exclusive, both on bucket bounds.
type Window struct{ From, To int64 }

// BucketKeys returns a breaker's savings bucket keys, given the key of
// its state (which ends in "state" and holds the breaker's hash tag):
// <tag>saved:m:<minutes since the epoch> for the minute bucket holding
// at, and <tag>saved:h:<hours since the epoch> for the hour's.
func BucketKeys(stateKey string, at time.Time) (minute, hour string) {
	tag := strings.TrimSuffix(stateKey, "state") + "saved:"
	return tag + "m:" + strconv.FormatInt(at.Unix()/60, 10), tag + "h:" + strconv.FormatInt(at.Unix()/3600, 10)
}
