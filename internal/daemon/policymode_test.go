package daemon

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecurityPolicyFileOthersMayWriteIsRefused (L1): the policy file holds recovery
// checks' API keys, so one its group or others may write is refused (at
// start and on reload alike: both read through readPolicy), and one
// every local user may read is warned about when it holds credentials.
func TestSecurityPolicyFileOthersMayWriteIsRefused(t *testing.T) {
	const withKey = "breakers:\n  - match: \"search*\"\n    recovery_check:\n" +
		"      http: {url: \"https://status.example/health\", headers: {X-Api-Key: secret}}\n"
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, withKey)
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readPolicy(path); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Errorf("readPolicy of a 0666 policy file = %v, want it refused as writable", err)
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	set, _, err := readPolicy(path)
	if err != nil {
		t.Fatalf("readPolicy of a 0644 policy file: %v", err)
	}
	var logs bytes.Buffer
	logPolicyWarnings(slog.New(slog.NewTextHandler(&logs, nil)), path, set)
	if !strings.Contains(logs.String(), "readable by every local user") {
		t.Errorf("log of a world-readable policy with an API key = %q, want a warning", logs.String())
	}
}
