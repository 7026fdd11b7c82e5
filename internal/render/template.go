// Package render fills the conformance templates (conformance/README.md):
// the circuit_open tool result and the run notice, the text a model reads
// in place of a denied call and about the tools a run lost.
package render

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// node is one piece of a parsed template: text, a placeholder, or a
// section (# or ^) with its body.
type node struct {
	text   string
	kind   byte // 0 text, 'v' placeholder, '#' section, '^' inverted section
	name   string
	filter string
	body   []node
}

// tagRE matches every tag of the syntax; anything else between {{ and }}
// is refused by parse.
var tagRE = regexp.MustCompile(`\{\{([#^/]?)([a-z_]+)(\|json|\|join)?\}\}`)

// parse reads a template, refusing a malformed tag or an unbalanced
// section.
func parse(src string) ([]node, error) {
	var stack [][]node
	var open []string
	cur := []node{}
	for src != "" {
		loc := tagRE.FindStringSubmatchIndex(src)
		i := strings.Index(src, "{{")
		if i < 0 {
			cur = append(cur, node{text: src})
			break
		}
		if loc == nil || loc[0] != i {
			return nil, fmt.Errorf("render: malformed tag at %q", trim(src[i:]))
		}
		if i > 0 {
			cur = append(cur, node{text: src[:i]})
		}
		sigil, name, filter := src[loc[2]:loc[3]], src[loc[4]:loc[5]], ""
		if loc[6] >= 0 {
			filter = src[loc[6]+1 : loc[7]]
		}
		src = src[loc[1]:]
		switch {
		case sigil == "":
			cur = append(cur, node{kind: 'v', name: name, filter: filter})
		case filter != "":
			return nil, fmt.Errorf("render: a section tag takes no filter: {{%s%s|%s}}", sigil, name, filter)
		case sigil == "/":
			if len(open) == 0 || open[len(open)-1] != name {
				return nil, fmt.Errorf("render: {{/%s}} closes no open section", name)
			}
			body := cur
			cur, stack = stack[len(stack)-1], stack[:len(stack)-1]
			cur[len(cur)-1].body = body
			open = open[:len(open)-1]
		default:
			cur = append(cur, node{kind: sigil[0], name: name})
			stack, open, cur = append(stack, cur), append(open, name), []node{}
		}
	}
	if len(open) > 0 {
		return nil, fmt.Errorf("render: section %q is never closed", open[len(open)-1])
	}
	return cur, nil
}

func trim(s string) string {
	if len(s) > 20 {
		return s[:20]
	}
	return s
}

// Data is a template's inputs: strings, int64s, bools, []string and
// []Data (a list a section repeats over).
type Data map[string]any

// execute renders nodes with scopes (innermost last) into b.
func execute(b *strings.Builder, nodes []node, scopes []Data) {
	for _, n := range nodes {
		v := lookup(scopes, n.name)
		switch n.kind {
		case 0:
			b.WriteString(n.text)
		case 'v':
			b.WriteString(format(v, n.filter))
		case '^':
			if !set(v) {
				execute(b, n.body, scopes)
			}
		case '#':
			if items, ok := v.([]Data); ok {
				for _, it := range items {
					execute(b, n.body, append(scopes, it))
				}
			} else if set(v) {
				execute(b, n.body, scopes)
			}
		}
	}
}

func lookup(scopes []Data, name string) any {
	for i := len(scopes) - 1; i >= 0; i-- {
		if v, ok := scopes[i][name]; ok {
			return v
		}
	}
	return nil
}

// set is the syntax's "set": not absent, false, 0, "" or an empty list.
func set(v any) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case string:
		return v != ""
	case []string:
		return len(v) > 0
	case []Data:
		return len(v) > 0
	}
	return true
}

func format(v any, filter string) string {
	switch v := v.(type) {
	case string:
		if filter == "json" {
			return Quote(v)
		}
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case bool:
		return strconv.FormatBool(v)
	case []string:
		if filter == "join" {
			return strings.Join(v, ", ")
		}
		q := make([]string, len(v))
		for i, s := range v {
			q[i] = Quote(s)
		}
		return "[" + strings.Join(q, ",") + "]"
	}
	return ""
}

// Quote renders s as a JSON string by the conformance escaping rules: ",
// \, newline, carriage return and tab by their short escapes; every other
// code point below U+0020, and U+007F, as \u00XX; everything else as is.
func Quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
