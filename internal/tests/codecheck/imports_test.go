package codecheck

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/breakerd/breakerd/"

// TestImportGraph holds the house's map: the daemon's packages
// (internal/) never import the worker-side ones (pkg/), and test support
// lives in internal/tests/ alone: no other package's non-test code imports
// the testing package or a package of internal/tests/; the rooms moved out
// of the store (storeRooms) never import it.
func TestImportGraph(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		for _, imp := range imports {
			if msg := importRule(pkg, imp); msg != "" {
				t.Errorf("%s imports %s: %s", pkg, imp, msg)
			}
		}
	}
}

// storeRooms are the concerns that have left internal/store for rooms of
// their own: the store holds them, never the other way round.
var storeRooms = map[string]bool{"internal/ceiling": true, "internal/savings": true}

func importRule(pkg, imp string) string {
	support := strings.HasPrefix(pkg, module+"internal/tests/")
	switch {
	case strings.HasPrefix(pkg, module+"internal/") && strings.HasPrefix(imp, module+"pkg/"):
		return "internal/ is the daemon's side and never imports pkg/"
	case !support && imp == "testing":
		return "test support belongs in internal/tests/"
	case !support && strings.HasPrefix(imp, module+"internal/tests/"):
		return "product code never imports test support"
	case storeRooms[strings.TrimPrefix(pkg, module)] && imp == module+"internal/store":
		return "a room moved out of the store takes what it needs as arguments and never imports the store"
	}
	return ""
}

// TestImportRuleNames holds importRule to the arrows it refuses, so that
// TestImportGraph passing means the graph is clean, not the rule blind.
func TestImportRuleNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pkg, imp string
		refused  bool
	}{
		{"internal/ceiling", "internal/store", true},
		{"internal/savings", "internal/store", true},
		{"internal/store", "internal/ceiling", false},
		{"internal/server", "internal/store", false},
		{"internal/mcp", "pkg/client", true},
		{"internal/store", "internal/tests/testredis", true},
	} {
		if got := importRule(module+c.pkg, module+c.imp) != ""; got != c.refused {
			t.Errorf("importRule(%s, %s) refuses = %v, want %v", c.pkg, c.imp, got, c.refused)
		}
	}
}
