// Package conformance holds the cases and templates every breakerd client
// is held to (README.md in this folder); Go code reads the templates from
// it, so the text a model reads has one source.
package conformance

import "embed"

//go:embed templates/*.tmpl
var templates embed.FS

// Template returns the named template (tool_result or notice) as
// README.md defines it: the file's text without its final newline.
func Template(name string) (string, error) {
	b, err := templates.ReadFile("templates/" + name + ".tmpl")
	if err != nil {
		return "", err
	}
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	return string(b), nil
}
