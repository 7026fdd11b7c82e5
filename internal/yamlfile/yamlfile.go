// Package yamlfile decodes breakerd's YAML files (policies, tokens, hooks)
// one way: strictly (an unknown field is an error), one document per file,
// and with errors that fit on one line and name the line and field.
package yamlfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Decode reads b into v. Empty input leaves v as it is. Errors, each led
// by the field's path where the line holds one value: "rules[0].treshold:
// line 3: unknown field treshold", a type mismatch as yaml.v3 words it
// (joined on one line), a value an UnmarshalYAML refused, or a second
// document in the file.
func Decode(b []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return nameFields(oneLine(err), b)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("the file holds more than one YAML document")
	}
	return nil
}

// lineRef matches the "line N: " that starts each of an error's messages.
var lineRef = regexp.MustCompile(`(^|; )line (\d+): `)

// nameFields puts the field's path ("breakers[1].threshold") in front of
// each "line N: " of err that names a line holding exactly one scalar
// value of b, so that a bad value reads "breakers[1].threshold: line 4:
// "2.5" is not a whole number" whichever decoder raised it.
func nameFields(err error, b []byte) error {
	var root yaml.Node
	if yaml.Unmarshal(b, &root) != nil {
		return err
	}
	at := map[int]string{}
	seen := map[int]int{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				key := n.Content[i].Value
				if path != "" {
					key = path + "." + key
				}
				walk(n.Content[i+1], key)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		case yaml.ScalarNode:
			if path != "" {
				at[n.Line] = path
				seen[n.Line]++
			}
		}
	}
	walk(&root, "")
	msg := lineRef.ReplaceAllStringFunc(err.Error(), func(m string) string {
		sub := lineRef.FindStringSubmatch(m)
		var line int
		fmt.Sscan(sub[2], &line)
		if p, ok := at[line]; ok && seen[line] == 1 {
			return sub[1] + p + ": " + strings.TrimPrefix(m, sub[1])
		}
		return m
	})
	if msg == err.Error() {
		return err
	}
	return errors.New(msg)
}

// unknownField matches yaml.v3's "line 2: field treshold not found in type
// policy.overrides", whose type name means nothing to the file's author.
var unknownField = regexp.MustCompile(`field (\S+) not found in type .*`)

func oneLine(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = unknownField.ReplaceAllString(m, "unknown field $1")
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}

// Duration reads a YAML scalar such as "30s" or "15m" (Go's
// time.ParseDuration syntax) into a time.Duration. The error names the
// line: `line 4: "soon" is not a duration such as 30s or 15m`.
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration such as 30s or 15m", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}
