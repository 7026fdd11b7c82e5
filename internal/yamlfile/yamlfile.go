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

// Decode reads b into v. Empty input leaves v as it is. Errors:
// "line 3: unknown field treshold", a type mismatch as yaml.v3 words it
// (joined on one line), or a second document in the file.
func Decode(b []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return oneLine(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("the file holds more than one YAML document")
	}
	return nil
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
