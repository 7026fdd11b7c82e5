package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/breakerd/breakerd/internal/forgotten"
	"github.com/breakerd/breakerd/internal/metrics"
	"github.com/breakerd/breakerd/internal/store"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// keeper says when Redis may forget breakerd's state or has forgotten it,
// and limits the damage (docs/reliability.md, "Redis that forgets"): a
// log line, the metrics, and a state_lost alert (an event, so hooks
// deliver it) per lost state; a lost pin is put back.
type keeper struct {
	st  *store.Store
	m   *metrics.Metrics
	log *slog.Logger
	id  string // this daemon, the alert's actor
	// lost queues the losses the store reports (store.Options.OnLost) for
	// run, which raises their alerts off the Allow path.
	lost chan forgotten.Lost
	// runIDs are the run_id of each node at the last check.
	runIDs map[string]string
}

func newKeeper(log *slog.Logger, id string) *keeper {
	return &keeper{log: log, id: id, lost: make(chan forgotten.Lost, 1024), runIDs: map[string]string{}}
}

// onLost is store.Options.OnLost: it logs and counts the loss at once and
// queues its alert; it never blocks (a full queue drops the alert, logged).
func (k *keeper) onLost(l forgotten.Lost) {
	k.m.StateLost()
	k.log.Error(LogStateLost+" (a restart without persistence, an eviction or a flush): "+k.action(l),
		"breaker", l.Breaker, "known", l.KnownState(), "known_generation", l.Known.Gen, "redis_generation", l.Gen)
	select {
	case k.lost <- l:
	default:
		k.log.Error("state_lost alert dropped: too many at once", "breaker", l.Breaker)
	}
}

// action says what the daemons do about l.
func (k *keeper) action(l forgotten.Lost) string {
	if l.Pinned() {
		return "the operator's pin is put back (Force " + l.Known.Force + ")"
	}
	return fmt.Sprintf("daemons that heard it open deny it until its next probe time (%s)", time.UnixMilli(l.Known.ProbeAt).UTC().Format(time.RFC3339))
}

// run raises the alert of each loss queued until ctx ends, and puts back
// a lost pin (the daemon whose alert was raised does: once for the fleet).
func (k *keeper) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case l := <-k.lost:
			k.handle(ctx, l)
		}
	}
}

func (k *keeper) handle(ctx context.Context, l forgotten.Lost) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raised, err := k.st.RaiseLost(ctx, l, k.id, k.action(l))
	if err != nil {
		k.log.Error("state_lost alert not raised", "breaker", l.Breaker, "err", err)
		return
	}
	if !raised || !l.Pinned() {
		return
	}
	mode := pb.ForceMode_FORCE_MODE_OPEN
	if l.Known.Force == "closed" {
		mode = pb.ForceMode_FORCE_MODE_CLOSED
	}
	reason := l.Known.ForceReason + " (put back by " + k.id + ": Redis had lost this pin)"
	if _, err := k.st.Force(ctx, l.Breaker, mode, reason, 0, l.Known.ForceBy); err != nil {
		k.log.Error("lost pin not put back", "breaker", l.Breaker, "err", err)
	}
}

// check asks Redis how it keeps breakerd's keys (INFO, on every master)
// and whether it lost states this daemon heard (store.FindLost). The
// health check calls it when Redis answers first and whenever Redis comes
// back: unreachable before, or lacking the scripts (a restart, a
// failover, SCRIPT FLUSH).
func (k *keeper) check(ctx context.Context) {
	nodes, err := k.st.Keepings(ctx)
	if err != nil {
		k.log.Warn("could not read how redis keeps breakerd's keys (INFO)", "err", err)
	}
	risk := false
	for _, n := range nodes {
		risk = risk || n.EvictionRisk()
		k.logKeeping(n)
	}
	k.m.SetEvictionRisk(risk)
	if _, err := k.st.FindLost(ctx); err != nil {
		k.log.Warn("could not check whether redis lost the breakers this daemon knows", "err", err)
	}
}

// logKeeping says what the node n risks losing.
func (k *keeper) logKeeping(n store.Keeping) {
	if !n.Told {
		return
	}
	if prev, ok := k.runIDs[n.Addr]; ok && prev != n.RunID {
		k.log.Warn("redis restarted (its run_id changed)", "node", n.Addr)
	}
	k.runIDs[n.Addr] = n.RunID
	if n.EvictionRisk() {
		k.log.Warn("redis may evict breakerd's keys, and every one has a TTL: open breakers would answer CLOSED; set maxmemory-policy noeviction (docs/reliability.md)",
			"node", n.Addr, "maxmemory_policy", n.Policy, "maxmemory", n.MaxMemory)
	}
	if !n.AOF {
		k.log.Warn("redis has no AOF: a restart keeps at most its last RDB snapshot, and breakers opened or pinned since are lost (docs/reliability.md)",
			"node", n.Addr)
	}
}
