package breaker

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"
)

// TestEveryCauseIsKnown: every Cause constant of the package is in the
// set Known reads, so no cause an event carries is taken for a stranger's.
func TestEveryCauseIsKnown(t *testing.T) {
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range names {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, sp := range g.Specs {
				v := sp.(*ast.ValueSpec)
				if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "Cause" {
					continue
				}
				for _, val := range v.Values {
					lit, ok := val.(*ast.BasicLit)
					if !ok {
						t.Fatalf("a Cause constant's value is not a literal: %T", val)
					}
					n++
					if c := Cause(lit.Value[1 : len(lit.Value)-1]); !c.Known() {
						t.Errorf("Cause %q is not Known: add it to causes", c)
					}
				}
			}
		}
	}
	if n != len(causes) {
		t.Errorf("%d Cause constants, %d known causes: want the same set", n, len(causes))
	}
}
