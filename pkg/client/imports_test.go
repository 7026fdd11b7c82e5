package client

import (
	"go/build"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestImportsStayLight holds pkg/client to what a worker can afford to
// import: the standard library, grpc and protobuf (with google.rpc's
// error details), the generated breakerd.v1 stubs and breakerd's
// dependency-free rule packages, never go-redis or the daemon's
// internals. Module packages it imports are held to the same list.
func TestImportsStayLight(t *testing.T) {
	const module = "github.com/breakerd/breakerd/"
	allowedOwn := []string{module + "proto/breakerd/v1", module + "internal/limits"}
	allowedExternal := []string{"google.golang.org/grpc", "google.golang.org/protobuf", "google.golang.org/genproto/googleapis/rpc"}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")

	seen := map[string]bool{}
	var walk func(pkg string)
	walk = func(pkg string) {
		if seen[pkg] {
			return
		}
		seen[pkg] = true
		p, err := build.ImportDir(filepath.Join(root, strings.TrimPrefix(pkg, module)), 0)
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		for _, imp := range p.Imports {
			switch {
			case !strings.Contains(strings.Split(imp, "/")[0], "."): // the standard library
			case strings.HasPrefix(imp, module):
				if !slices.Contains(allowedOwn, imp) {
					t.Errorf("%s imports %s: pkg/client may import only %v of this module", pkg, imp, allowedOwn)
					continue
				}
				walk(imp)
			case !slices.ContainsFunc(allowedExternal, func(a string) bool { return imp == a || strings.HasPrefix(imp, a+"/") }):
				t.Errorf("%s imports %s: pkg/client may import only the standard library and %v", pkg, imp, allowedExternal)
			}
		}
	}
	walk(module + "pkg/client")
}
