package yamlfile

import (
	"strings"
	"testing"
)

type doc struct {
	Threshold int `yaml:"threshold"`
	Nested    struct {
		Timeout string `yaml:"timeout"`
	} `yaml:"nested"`
}

func TestDecode(t *testing.T) {
	var d doc
	if err := Decode([]byte("threshold: 3\nnested:\n  timeout: 5s\n"), &d); err != nil || d.Threshold != 3 || d.Nested.Timeout != "5s" {
		t.Fatalf("Decode = %+v, %v", d, err)
	}
	if err := Decode(nil, &d); err != nil {
		t.Errorf("empty input: %v", err)
	}
	for in, want := range map[string]string{
		"treshold: 3\n":                     "line 1: unknown field treshold",
		"nested:\n  timout: 5s\n":           "line 2: unknown field timout",
		"threshold: many\n":                 "cannot unmarshal",
		"threshold: 1\n---\nthreshold: 2\n": "more than one YAML document",
	} {
		err := Decode([]byte(in), &doc{})
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "struct") {
			t.Errorf("Decode(%q) = %v, want one line containing %q", in, err, want)
		}
	}
}
