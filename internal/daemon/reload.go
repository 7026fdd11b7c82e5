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
	"github.com/breakerd/breakerd/internal/secretfile"
)

// readPolicy reads and parses a policy file, returning the set and the
// SHA-256 of the bytes it was parsed from. Errors name the file. The file
// may hold recovery checks' API keys, so it is read as a secret file: one
// its group or others may write is refused (another user could point a
// check, and its key, anywhere).
func readPolicy(path string) (*policy.Set, [sha256.Size]byte, error) {
	b, _, err := secretfile.Read(path)
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

// fileReloader re-reads one file (the policy, the tokens or the hooks) on
// SIGHUP, and whenever its content changes (checked on each tick of a
// poll). It polls the content rather than watching the file with inotify:
// a content check notices every way a file gets replaced (an editor's
// write-and-rename, a Kubernetes ConfigMap's symlink swap, a network
// filesystem that sends no inotify events) for the cost of reading a small
// file every few seconds. A file that fails to read or parse is rejected
// with the error logged, and what is in force stays.
type fileReloader struct {
	// what names the file in logs: "policy", "tokens" or "hooks".
	what string
	path string
	// read reads and parses the file. It returns the SHA-256 of the bytes
	// read (zero when the file could not be read) and, when they parse, an
	// apply that puts them in force.
	read func(path string) (apply func(), sum [sha256.Size]byte, err error)
	// result is told of every reload tried: nil for one that took effect.
	result func(error)
	log    *slog.Logger
	// last is the content last tried, applied or rejected, so a poll acts
	// only on a change; lastErr keeps an unreadable file from being
	// logged on every tick.
	last    [sha256.Size]byte
	lastErr string
}

// newPolicyReloader returns the reloader of the policy file at path, whose
// content last applied had the SHA-256 last.
func newPolicyReloader(path string, last [sha256.Size]byte, log *slog.Logger, apply func(*policy.Set), result func(error)) *fileReloader {
	return &fileReloader{what: "policy", path: path, last: last, log: log, result: result,
		read: func(path string) (func(), [sha256.Size]byte, error) {
			set, sum, err := readPolicy(path)
			if err != nil {
				return nil, sum, err
			}
			return func() {
				apply(set)
				logPolicyWarnings(log, path, set)
			}, sum, nil
		}}
}

// logPolicyWarnings logs each warning of a policy file put in force (at
// start and on every reload): a rule an earlier rule shadows.
func logPolicyWarnings(log *slog.Logger, path string, set *policy.Set) {
	for _, w := range set.Warnings() {
		log.Warn("policy rule shadowed", "file", path, "warning", w)
	}
	if fi, err := os.Stat(path); err == nil && set.HoldsCredentials() {
		warnReadable(log, "--config", path, fi.Mode().Perm()&0o004 != 0)
	}
}

// reload reads the file and applies it when it parses. With force (a
// SIGHUP) it does so even when the content has not changed. It returns
// the error that rejected the file, or nil (applied, or unchanged).
func (r *fileReloader) reload(force bool, why string) error {
	apply, sum, err := r.read(r.path)
	if sum == ([sha256.Size]byte{}) && err != nil {
		// Unreadable: log once per distinct error, however often polled.
		if force || err.Error() != r.lastErr {
			r.lastErr = err.Error()
			r.log.Error(r.what+" reload rejected; the "+r.what+" in force stays", "trigger", why, "file", r.path, "err", err)
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
		r.log.Error(r.what+" reload rejected; the "+r.what+" in force stays", "trigger", why, "file", r.path, "err", err)
		r.result(err)
		return err
	}
	apply()
	r.result(nil)
	r.log.Info(r.what+" reloaded", "trigger", why, "file", r.path, "sha256", hex.EncodeToString(sum[:8]))
	return nil
}

// runReloaders reloads every reloader on each hup (forced) and each tick
// (on a change) until ctx ends. Either channel may be nil.
func runReloaders(ctx context.Context, rs []*fileReloader, hup <-chan os.Signal, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			for _, r := range rs {
				_ = r.reload(true, "SIGHUP")
			}
		case <-tick:
			for _, r := range rs {
				_ = r.reload(false, "file changed")
			}
		}
	}
}
