// Package auth authenticates breakerd's callers: bearer tokens with roles
// from a YAML file, checked by gRPC interceptors, and TLS for the listener.
//
// The tokens file, roles and what each call needs: docs/security.md.
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/yamlfile"
)

// Role is what a token may do.
type Role string

const (
	// RoleWorker may call Allow and Record (only as its own worker ids),
	// and the reads: Get, BatchGet, List, Watch, Events.
	RoleWorker Role = "worker"
	// RoleOperator may call everything, including Force, and act as any
	// worker id.
	RoleOperator Role = "operator"
)

// MinTokenBytes is the shortest token accepted in a tokens file.
const MinTokenBytes = 16

// Identity is who a token belongs to.
type Identity struct {
	// Name identifies the holder in events and logs ("alice",
	// "pool-a"); for an operator it is recorded as the Force's operator.
	Name string
	Role Role
	// Workers are the worker ids a worker token may act as: exact ids or
	// path.Match globs ("pool-a-*"). Empty for operators (any id).
	Workers []string
	// Breakers are the breakers the token may name: exact names or
	// path.Match globs ("search:*"). Empty: every breaker.
	Breakers []string
}

// MayUse reports whether the identity may name breaker in a call (Allow,
// Record, Get, BatchGet, Watch, Force, Events) and see it in a List.
func (id Identity) MayUse(breaker string) bool {
	if len(id.Breakers) == 0 {
		return true
	}
	for _, p := range id.Breakers {
		if ok, _ := path.Match(p, breaker); ok {
			return true
		}
	}
	return false
}

// Limited reports whether the identity is limited to some breakers.
func (id Identity) Limited() bool { return len(id.Breakers) > 0 }

// MayActAs reports whether the identity may send Allow and Record under
// worker id w.
func (id Identity) MayActAs(w string) bool {
	if id.Role == RoleOperator {
		return true
	}
	for _, p := range id.Workers {
		if ok, _ := path.Match(p, w); ok {
			return true
		}
	}
	return false
}

// Tokens is an immutable table of tokens, compared in constant time. It is
// safe for concurrent use.
type Tokens struct {
	entries []entry
}

type entry struct {
	digest [sha256.Size]byte
	id     Identity
}

// Len returns the number of tokens.
func (t *Tokens) Len() int { return len(t.entries) }

// Lookup returns the identity of token. Every entry is compared, in
// constant time over SHA-256 digests, so the time taken says nothing
// about which token (or which prefix) came close.
func (t *Tokens) Lookup(token string) (Identity, bool) {
	d := sha256.Sum256([]byte(token))
	var found Identity
	ok := 0
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(d[:], e.digest[:]) == 1 {
			found = e.id
			ok = 1
		}
	}
	return found, ok == 1
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// file is the YAML shape of a tokens file:
//
//	tokens:
//	  - name: alice                 # who: recorded as the operator of a Force
//	    role: operator
//	    token: "…at least 16 bytes…"
//	  - name: pool-a
//	    role: worker
//	    token_sha256: "9f86d0…"     # hex SHA-256 of the token, instead of token
//	    workers: ["pool-a-*"]       # worker ids (or path.Match globs) it may act as
//	    breakers: ["search:*"]      # optional: the breakers (or globs) it may name
type file struct {
	Tokens []struct {
		Name        string   `yaml:"name"`
		Role        Role     `yaml:"role"`
		Token       string   `yaml:"token"`
		TokenSHA256 string   `yaml:"token_sha256"`
		Workers     []string `yaml:"workers"`
		Breakers    []string `yaml:"breakers"`
	} `yaml:"tokens"`
}

// Parse reads a tokens file's contents (the daemon reads the file through
// secretfile.Read, which refuses one others may write). Every entry needs a name (unique),
// a role (worker or operator) and exactly one of token (at least
// MinTokenBytes) or token_sha256 (64 hex digits); a worker needs at least
// one workers entry, an operator none. Errors name the field
// ("tokens[2].workers: a worker token needs at least one worker id") and
// never contain a token.
func Parse(b []byte) (*Tokens, error) {
	var f file
	if err := yamlfile.Decode(b, &f); err != nil {
		return nil, err
	}
	if len(f.Tokens) == 0 {
		return nil, errors.New("tokens: at least one token is required")
	}
	t := &Tokens{}
	names := map[string]bool{}
	for i, e := range f.Tokens {
		field := func(name, format string, args ...any) error {
			return fmt.Errorf("tokens[%d].%s: %s", i, name, fmt.Sprintf(format, args...))
		}
		switch {
		case e.Name == "":
			return nil, field("name", "is required")
		case len(e.Name) > 256 || !printable(e.Name):
			return nil, field("name", "must be printable text of at most 256 bytes (it is recorded as the operator of a Force)")
		case names[e.Name]:
			return nil, field("name", "%q is used twice", e.Name)
		case e.Role != RoleWorker && e.Role != RoleOperator:
			return nil, field("role", "must be worker or operator, got %q", e.Role)
		case (e.Token == "") == (e.TokenSHA256 == ""):
			return nil, field("token", "give exactly one of token and token_sha256")
		case e.Token != "" && len(e.Token) < MinTokenBytes:
			return nil, field("token", "must be at least %d bytes", MinTokenBytes)
		case e.Role == RoleWorker && len(e.Workers) == 0:
			return nil, field("workers", "a worker token needs at least one worker id")
		case e.Role == RoleOperator && len(e.Workers) > 0:
			return nil, field("workers", "an operator token may act as any worker; remove workers")
		}
		for j, w := range e.Workers {
			if _, err := path.Match(w, ""); err != nil || w == "" {
				return nil, field(fmt.Sprintf("workers[%d]", j), "%q is not a worker id or glob", w)
			}
			if !strings.ContainsAny(w, `*?[\`) {
				var fe *limits.FieldError
				if err := limits.WorkerID(fmt.Sprintf("workers[%d]", j), w); errors.As(err, &fe) {
					return nil, field(fe.Field, "is not a worker id (nor a glob): %s", fe.Problem)
				}
			}
		}
		for j, b := range e.Breakers {
			if _, err := path.Match(b, ""); err != nil || b == "" {
				return nil, field(fmt.Sprintf("breakers[%d]", j), "%q is not a breaker name or glob", b)
			}
		}
		names[e.Name] = true
		en := entry{id: Identity{Name: e.Name, Role: e.Role, Workers: slices.Clone(e.Workers), Breakers: slices.Clone(e.Breakers)}}
		if e.Token != "" {
			en.digest = sha256.Sum256([]byte(e.Token))
		} else {
			d, err := hex.DecodeString(e.TokenSHA256)
			if err != nil || len(d) != sha256.Size {
				return nil, field("token_sha256", "must be 64 hex digits")
			}
			copy(en.digest[:], d)
		}
		for k, prev := range t.entries {
			if prev.digest == en.digest {
				return nil, field("token", "is the same as tokens[%d]'s", k)
			}
		}
		t.entries = append(t.entries, en)
	}
	return t, nil
}
