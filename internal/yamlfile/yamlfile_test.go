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

// A bad value's error names its field's path, whichever decoder words it.
func TestDecodeNamesTheField(t *testing.T) {
	type rule struct {
		Match   string   `yaml:"match"`
		Count   int      `yaml:"count"`
		Timeout Duration `yaml:"timeout"`
	}
	type file struct {
		Rules []rule `yaml:"rules"`
	}
	for _, tc := range []struct{ in, want string }{
		{"rules:\n  - match: a\n  - match: b\n    count: many\n", "rules[1].count: line 4: cannot unmarshal"},
		{"rules:\n  - match: a\n    timeout: soon\n", `rules[0].timeout: line 3: "soon" is not a duration`},
		{"rules:\n  - match: a\n    cuont: 3\n", "rules[0].cuont: line 3: unknown field cuont"},
		// Two values on one line: which one is meant is not guessed.
		{"rules:\n  - {match: a, count: x}\n", "line 2: cannot unmarshal"},
	} {
		var f file
		err := Decode([]byte(tc.in), &f)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Decode(%q) = %v, want it to start %q", tc.in, err, tc.want)
		}
	}
}
