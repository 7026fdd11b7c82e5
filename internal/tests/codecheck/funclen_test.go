package codecheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// harness matches the folders that are not product code: the experiment
// harnesses beside their commands and the examples.
var harness = regexp.MustCompile(`^(cmd/[^/]+/(bench|replay|soak)|examples)(/|$)`)

// generated is the marker go generate's tools write (go.dev/s/generatedcode).
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// TestNoLongFunctions walks every non-test, non-generated Go file of the
// module outside the harnesses and examples and fails on any function
// longer than MaxFuncLines.
func TestNoLongFunctions(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" ||
				name == "vendor" || harness.MatchString(rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		files++
		checkFile(t, path, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("walked %d product files from %s; want the whole module", files, root)
	}
}

// checkFile reports each function of the file at path longer than
// MaxFuncLines; a generated file is skipped.
func checkFile(t *testing.T, path, rel string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	if err != nil {
		t.Fatalf("parse %s: %v", rel, err)
	}
	if generated.MatchString(firstComments(f)) {
		return
	}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
		if lines > MaxFuncLines {
			t.Errorf("%s:%d: %s is %d lines, want at most %d", rel, fset.Position(fn.Pos()).Line, name(fn), lines, MaxFuncLines)
		}
	}
}

// firstComments is the text of the comments before the package clause.
func firstComments(f *ast.File) string {
	var b strings.Builder
	for _, c := range f.Comments {
		if c.Pos() >= f.Package {
			break
		}
		for _, l := range c.List {
			b.WriteString(l.Text)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// name is fn's name as a reader looks it up: Recv.Name for a method.
func name(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if g, ok := typ.(*ast.IndexExpr); ok {
		typ = g.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
