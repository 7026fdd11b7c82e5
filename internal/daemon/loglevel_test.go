package daemon

import (
	"bytes"
	"strings"
	"testing"
)

// The daemon's --log-level (or BREAKERD_LOG_LEVEL) is checked once, naming
// the flag, and sets its logger's level.
func TestDaemonLogLevel(t *testing.T) {
	none := func(string) string { return "" }
	if _, err := ParseConfig([]string{"--log-level", "loud"}, none, nil); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Errorf("--log-level loud: %v, want an error naming --log-level", err)
	}
	c, err := ParseConfig(nil, func(k string) string { return map[string]string{"BREAKERD_LOG_LEVEL": "error"}[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	log := NewLogger(c, &out)
	log.Warn("dropped")
	log.Error("kept")
	if got := out.String(); strings.Contains(got, "dropped") || !strings.Contains(got, "kept") {
		t.Errorf("at BREAKERD_LOG_LEVEL=error the daemon logged %q", got)
	}
}
