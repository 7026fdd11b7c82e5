package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/breakerd/breakerd/internal/policy"
)

// readPolicy reads and parses a policy file, returning the set and the
// SHA-256 of the bytes it was parsed from. Errors name the file.
func readPolicy(path string) (*policy.Set, [sha256.Size]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, [sha256.Size]byte{}, fmt.Errorf("policy: %w", err)
	}
	sum := sha256.Sum256(b)
	set, err := policy.Parse(b)
	if err != nil {
		return nil, sum, fmt.Errorf("policy: %s: %w", path, err)
	}
	return set, sum, nil
}

// policyReloader re-reads the policy file on SIGHUP, and whenever its
// content changes (checked on each tick of a poll). It polls the content
// rather than watching the file with inotify: a content check notices
// every way a file gets replaced (an editor's write-and-rename, a
// Kubernetes ConfigMap's symlink swap, a network filesystem that sends no
// inotify events) for the cost of reading a small file every few seconds.
// A file that fails to read or parse is rejected with the error logged,
// and the policy in force stays.
type policyReloader struct {
	path  string
	apply func(*policy.Set)
	// result is told of every reload tried: nil for one that took effect.
	result func(error)
	log    *slog.Logger
	// last is the content last tried, applied or rejected, so a poll acts
	// only on a change; lastErr keeps an unreadable file from being
	// logged on every tick.
	last    [sha256.Size]byte
	lastErr string
}

// reload reads the file and applies it when it parses. With force (a
// SIGHUP) it does so even when the content has not changed. It returns
// the error that rejected the file, or nil (applied, or unchanged).
func (r *policyReloader) reload(force bool, why string) error {
	set, sum, err := readPolicy(r.path)
	if set == nil && sum == ([sha256.Size]byte{}) && err != nil {
		// Unreadable: log once per distinct error, however often polled.
		if force || err.Error() != r.lastErr {
			r.lastErr = err.Error()
			r.log.Error("policy reload rejected; the policy in force stays", "trigger", why, "file", r.path, "err", err)
			r.result(err)
		}
		return err
	}
	r.lastErr = ""
	if !force && sum == r.last {
		return nil
	}
	r.last = sum
	if err != nil {
		r.log.Error("policy reload rejected; the policy in force stays", "trigger", why, "file", r.path, "err", err)
		r.result(err)
		return err
	}
	r.apply(set)
	r.result(nil)
	r.log.Info("policy reloaded", "trigger", why, "file", r.path, "sha256", hex.EncodeToString(sum[:8]))
	return nil
}

// run reloads on every hup (forced) and every tick (on a change) until ctx
// ends. Either channel may be nil.
func (r *policyReloader) run(ctx context.Context, hup <-chan os.Signal, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = r.reload(true, "SIGHUP")
		case <-tick:
			_ = r.reload(false, "file changed")
		}
	}
}
