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
// the testing package or a package of internal/tests/.
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

func importRule(pkg, imp string) string {
	support := strings.HasPrefix(pkg, module+"internal/tests/")
	switch {
	case strings.HasPrefix(pkg, module+"internal/") && strings.HasPrefix(imp, module+"pkg/"):
		return "internal/ is the daemon's side and never imports pkg/"
	case !support && imp == "testing":
		return "test support belongs in internal/tests/"
	case !support && strings.HasPrefix(imp, module+"internal/tests/"):
		return "product code never imports test support"
	}
	return ""
}
