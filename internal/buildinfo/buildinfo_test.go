package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFrom(t *testing.T) {
	vcs := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/breakerd/breakerd", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "4e9e9f4a"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	installed := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}}
	for _, tc := range []struct {
		name     string
		bi       *debug.BuildInfo
		ldV, ldC string
		want     Info
	}{
		{"a git checkout", vcs, "", "", Info{"dev", "4e9e9f4a-dirty", "go1.26.8"}},
		{"go install at a version", installed, "", "", Info{"v1.2.3", "unknown", "go1.26.8"}},
		{"the linker wins", vcs, "v1.3.0", "abcdef0", Info{"v1.3.0", "abcdef0", "go1.26.8"}},
		{"-buildvcs=false and -X", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "v1.3.0", "abcdef0", Info{"v1.3.0", "abcdef0", "go1.26.8"}},
	} {
		if got := from(tc.bi, tc.ldV, tc.ldC); got != tc.want {
			t.Errorf("%s: from = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if got := from(nil, "", ""); got.Version != "dev" || got.Commit != "unknown" || !strings.HasPrefix(got.GoVersion, "go") {
		t.Errorf("no build info: from = %+v, want dev, unknown and the running Go", got)
	}
}

func TestString(t *testing.T) {
	got := Info{"v1.2.3", "abcdef0", "go1.26.8"}.String("breakerd")
	if want := "breakerd v1.2.3 (commit abcdef0, go1.26.8)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}
