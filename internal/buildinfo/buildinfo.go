// Package buildinfo says which build of breakerd is running: version,
// commit and Go version, for every binary's --version and the
// breakerd_build_info gauge.
//
// The values come from runtime/debug.ReadBuildInfo (a module version
// when built with `go install …@v1.2.3`, the VCS revision when built
// from a git checkout) and are overridden by the linker where a build
// sets them, as the Makefile and Dockerfile do (the image is built with
// -buildvcs=false and carries no revision otherwise):
//
//	go build -ldflags "-X github.com/breakerd/breakerd/internal/buildinfo.version=v1.2.3 \
//	  -X github.com/breakerd/breakerd/internal/buildinfo.commit=4e9e9f4" ./cmd/...
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by the linker (-ldflags -X); empty when the build did not set them.
// They are never written at run time.
var (
	version string
	commit  string
)

// Info describes one build.
type Info struct {
	// Version is the release (v1.2.3, or `git describe` output), "dev"
	// when neither the linker nor the module knows one.
	Version string
	// Commit is the VCS revision, with "-dirty" when the tree had local
	// changes; "unknown" when the build carries none.
	Commit string
	// GoVersion is the Go release the binary was built with (go1.26.8).
	GoVersion string
}

// Get returns the running binary's build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return from(bi, version, commit)
}

// from merges the build's embedded information (bi may be nil) with the
// linker's values, which win when set.
func from(bi *debug.BuildInfo, ldVersion, ldCommit string) Info {
	in := Info{Version: "dev", Commit: "unknown", GoVersion: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			in.Version = v
		}
		var rev string
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			in.Commit = rev
			if dirty {
				in.Commit += "-dirty"
			}
		}
	}
	if ldVersion != "" {
		in.Version = ldVersion
	}
	if ldCommit != "" {
		in.Commit = ldCommit
	}
	return in
}

// String is the --version line: "<program> <version> (commit <commit>, <go version>)".
func (in Info) String(program string) string {
	return fmt.Sprintf("%s %s (commit %s, %s)", program, in.Version, in.Commit, in.GoVersion)
}
