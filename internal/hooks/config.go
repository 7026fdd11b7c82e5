// Package hooks delivers breaker alerts to webhooks, once per hook across
// the fleet: every daemon reads the breakers' durable event streams
// through one Redis consumer group per hook, so each event goes to one
// daemon, which posts it (signed, retried with backoff) and acknowledges
// it; entries left pending by a daemon that died are reclaimed by another.
//
// The hooks file, the payload and its signature: docs/alerts-and-hooks.md.
package hooks

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"time"
	"unicode"

	"github.com/breakerd/breakerd/internal/webhook"
	"github.com/breakerd/breakerd/internal/yamlfile"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The events a hook may ask for.
const (
	// EventOpened: a trip, closed -> open (not the re-opens after failed
	// probes: stuck_open covers a long outage).
	EventOpened = "opened"
	// EventStuckOpen: still open after two cooldown cycles.
	EventStuckOpen = "stuck_open"
	// EventCredentialRevoked: a 401 on the breaker's credential (and the
	// pause, when the credential had worked).
	EventCredentialRevoked = "credential_revoked"
	// EventSuspectWorker: one worker alone failed past the threshold.
	EventSuspectWorker = "suspect_worker"
	// EventPauseExpiring: a pause lapses soon (a quarter of its pause_ttl
	// before).
	EventPauseExpiring = "pause_expiring"
	// EventProbeAbandoned: a worker let 3 probe leases in a row lapse.
	EventProbeAbandoned = "probe_abandoned"
	// EventQuotaExhausted: a 402 (the account's quota or billing), and the
	// pause when min_workers workers saw it.
	EventQuotaExhausted = "quota_exhausted"
	// EventOpenFractionCap: a trip stopped by the open-fraction cap of
	// the breaker's group (the breaker stays closed).
	EventOpenFractionCap = "open_fraction_cap"
	// EventFlapping: a trip soon after a probe closed the breaker (its
	// cooldown grows instead of starting over).
	EventFlapping = "flapping"
	// EventStateLost: Redis lost a state a daemon heard the breaker in (a
	// restart without persistence, an eviction, a flush).
	EventStateLost = "state_lost"
	// EventForced: an operator's Force (OPEN, CLOSED or AUTO).
	EventForced = "forced"
	// EventClosed: back to closed by itself (a probe succeeded, a forced
	// state expired).
	EventClosed = "closed"
)

// Events lists every event name, in documentation order.
var Events = []string{EventOpened, EventStuckOpen, EventFlapping, EventCredentialRevoked, EventQuotaExhausted, EventSuspectWorker,
	EventPauseExpiring, EventProbeAbandoned, EventOpenFractionCap, EventStateLost, EventForced, EventClosed}

// EventName returns the hook event an Event is, or "" for events no hook
// receives (a probe starting: open -> half_open, half_open -> open).
func EventName(e *pb.Event) string {
	switch e.GetKind() {
	case pb.EventKind_EVENT_KIND_FORCED:
		return EventForced
	case pb.EventKind_EVENT_KIND_CREDENTIAL_REVOKED:
		return EventCredentialRevoked
	case pb.EventKind_EVENT_KIND_STUCK_OPEN:
		return EventStuckOpen
	case pb.EventKind_EVENT_KIND_FLAPPING:
		return EventFlapping
	case pb.EventKind_EVENT_KIND_SUSPECT_WORKER:
		return EventSuspectWorker
	case pb.EventKind_EVENT_KIND_PAUSE_EXPIRING:
		return EventPauseExpiring
	case pb.EventKind_EVENT_KIND_PROBE_ABANDONED:
		return EventProbeAbandoned
	case pb.EventKind_EVENT_KIND_QUOTA_EXHAUSTED:
		return EventQuotaExhausted
	case pb.EventKind_EVENT_KIND_OPEN_FRACTION_CAP:
		return EventOpenFractionCap
	case pb.EventKind_EVENT_KIND_STATE_LOST:
		return EventStateLost
	case pb.EventKind_EVENT_KIND_TRANSITION:
		switch {
		case e.GetTo() == pb.State_STATE_OPEN && e.GetFrom() == pb.State_STATE_CLOSED:
			return EventOpened
		case e.GetTo() == pb.State_STATE_CLOSED:
			return EventClosed
		}
	}
	return ""
}

// Hook is one webhook. Zero durations mean their defaults.
type Hook struct {
	// Name identifies the hook: its consumer group on every breaker's
	// stream is "hook:<name>". Renaming a hook starts it afresh.
	Name string
	// URL receives a POST per event: https, or http to a loopback host
	// (localhost, 127.0.0.0/8, ::1), as a sidecar relay would be. Redirects
	// are never followed.
	URL string
	// Events are the event names to send (see Events).
	Events []string
	// Breakers, when set, limits the hook to breakers matching one of
	// these path.Match globs ("stripe:*"). Empty: every breaker.
	Breakers []string
	// Secret keys the signatures: "whsec_" and the base64 of the key, as
	// the Standard Webhooks spec gives them, or a raw string used as its
	// bytes. The key must be at least MinSecretBytes long. It signs the
	// webhook-signature header (v1: HMAC-SHA256 of id.timestamp.body).
	Secret string
	// Timeout bounds one attempt. Default 5s.
	Timeout time.Duration
	// Backoff is the wait after the first failed attempt; it doubles after
	// each further failure up to MaxBackoff. Default 1s.
	Backoff time.Duration
	// MaxBackoff caps the wait between attempts. Default 1m.
	MaxBackoff time.Duration
	// GiveUpAfter bounds how long one event is retried: after it the event
	// is dropped with an error log line and the abandoned counter. Default 1h.
	GiveUpAfter time.Duration
}

// MinSecretBytes is the shortest hook key accepted: 32 bytes (256 bits,
// HMAC-SHA256's block of output). Make one with
// `echo whsec_$(openssl rand -base64 32)`.
const MinSecretBytes = 32

// Wants reports whether the hook takes event name on breaker.
func (h Hook) Wants(name, breaker string) bool {
	return name != "" && slices.Contains(h.Events, name) && h.covers(breaker)
}

// covers reports whether breaker matches the hook's Breakers globs.
func (h Hook) covers(breaker string) bool {
	if len(h.Breakers) == 0 {
		return true
	}
	for _, p := range h.Breakers {
		if ok, _ := path.Match(p, breaker); ok {
			return true
		}
	}
	return false
}

func (h Hook) withDefaults() Hook {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&h.Timeout, 5*time.Second)
	def(&h.Backoff, time.Second)
	def(&h.MaxBackoff, time.Minute)
	def(&h.GiveUpAfter, time.Hour)
	return h
}

// Validate reports the first invalid field, named as in the YAML file.
func (h Hook) Validate() error {
	u, err := url.Parse(h.URL)
	switch {
	case h.Name == "":
		return errors.New("name: is required")
	case len(h.Name) > 128 || !printableNoSpace(h.Name):
		return fmt.Errorf("name: must be at most 128 printable characters without spaces, got %q", h.Name)
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("url: must be an https:// URL (or http:// to a loopback host), got %s", redactURL(h.URL))
	case u.Scheme == "http" && !loopbackHost(u.Hostname()):
		return fmt.Errorf("url: must be https:// unless the host is loopback (signed alerts would cross the network in the clear), got %s", redactURL(h.URL))
	case len(h.Events) == 0:
		return fmt.Errorf("events: at least one of %v is required", Events)
	case h.Secret == "":
		return errors.New("secret: is required (or secret_env naming a set variable): receivers must be able to check the signature")
	case secretErr(h.Secret) != nil:
		return fmt.Errorf("secret: %w", secretErr(h.Secret))
	case h.Timeout < 0 || h.Backoff < 0 || h.MaxBackoff < 0 || h.GiveUpAfter < 0:
		return errors.New("timeout: durations must not be negative")
	}
	for i, e := range h.Events {
		if !slices.Contains(Events, e) {
			return fmt.Errorf("events[%d]: %q is not one of %v", i, e, Events)
		}
	}
	for i, p := range h.Breakers {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("breakers[%d]: %q is not a valid glob", i, p)
		}
	}
	d := h.withDefaults()
	if d.MaxBackoff < d.Backoff {
		return fmt.Errorf("max_backoff: must be at least backoff (%s), got %s", d.Backoff, d.MaxBackoff)
	}
	return nil
}

// secretErr says what is wrong with a secret (never quoting it), or nil.
func secretErr(secret string) error {
	key, err := webhook.Key(secret)
	if err != nil {
		return errors.New(`after "whsec_" comes base64 (standard alphabet, padded)`)
	}
	if len(key) < MinSecretBytes {
		return fmt.Errorf("the key must be at least %d bytes, got %d: make one with `echo whsec_$(openssl rand -base64 32)`", MinSecretBytes, len(key))
	}
	return nil
}

// loopbackHost reports whether host (no port) is localhost or a loopback IP.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// redactURL quotes u with any user info, path and query hidden: a
// webhook URL often carries a secret (a path token).
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return "(an unparsable URL)"
	}
	return fmt.Sprintf("%q", p.Scheme+"://"+p.Host+"/…")
}

func printableNoSpace(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// file is the YAML shape of a hooks file:
//
//	hooks:
//	  - name: oncall                       # unique; names the consumer group
//	    url: https://hooks.example.com/breakerd
//	    events: [opened, stuck_open, credential_revoked, suspect_worker, forced, closed]
//	    breakers: ["stripe:*"]             # optional: only these (path.Match globs)
//	    secret_env: ONCALL_HOOK_SECRET     # or secret: "whsec_..." (≥ 32-byte HMAC-SHA256 key)
//	    timeout: 5s                        # per attempt
//	    backoff: 1s                        # first retry wait, doubling...
//	    max_backoff: 1m                    # ...up to this
//	    give_up_after: 1h                  # then log an error, count it, move on
type file struct {
	Hooks []struct {
		Name        string             `yaml:"name"`
		URL         string             `yaml:"url"`
		Events      []string           `yaml:"events"`
		Breakers    []string           `yaml:"breakers"`
		Secret      string             `yaml:"secret"`
		SecretEnv   string             `yaml:"secret_env"`
		Timeout     *yamlfile.Duration `yaml:"timeout"`
		Backoff     *yamlfile.Duration `yaml:"backoff"`
		MaxBackoff  *yamlfile.Duration `yaml:"max_backoff"`
		GiveUpAfter *yamlfile.Duration `yaml:"give_up_after"`
	} `yaml:"hooks"`
}

// Parse reads a hooks file's contents; getenv resolves secret_env.
// Errors name the field ("hooks[1].url: ...") and never contain a
// secret. Empty input is no hooks.
func Parse(b []byte, getenv func(string) string) ([]Hook, error) {
	var f file
	if err := yamlfile.Decode(b, &f); err != nil {
		return nil, err
	}
	var out []Hook
	names := map[string]bool{}
	for i, e := range f.Hooks {
		h := Hook{Name: e.Name, URL: e.URL, Events: e.Events, Breakers: e.Breakers, Secret: e.Secret}
		if e.SecretEnv != "" {
			if e.Secret != "" {
				return nil, fmt.Errorf("hooks[%d].secret_env: give secret or secret_env, not both", i)
			}
			if h.Secret = getenv(e.SecretEnv); h.Secret == "" {
				return nil, fmt.Errorf("hooks[%d].secret_env: %s is not set", i, e.SecretEnv)
			}
		}
		for _, d := range []struct {
			from *yamlfile.Duration
			to   *time.Duration
		}{{e.Timeout, &h.Timeout}, {e.Backoff, &h.Backoff}, {e.MaxBackoff, &h.MaxBackoff}, {e.GiveUpAfter, &h.GiveUpAfter}} {
			if d.from != nil {
				*d.to = time.Duration(*d.from)
			}
		}
		if err := h.Validate(); err != nil {
			return nil, fmt.Errorf("hooks[%d].%w", i, err)
		}
		if names[h.Name] {
			return nil, fmt.Errorf("hooks[%d].name: %q is used twice", i, h.Name)
		}
		names[h.Name] = true
		out = append(out, h)
	}
	return out, nil
}
