package logging_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/logging"
)

// A logger drops what is below its level, and writes durations as Go
// duration strings in JSON.
func TestLevelAndFormat(t *testing.T) {
	var out bytes.Buffer
	level, err := logging.ParseLevel("warn")
	if err != nil {
		t.Fatal(err)
	}
	log := logging.New(&out, "json", level)
	log.Info("dropped")
	log.Warn("kept", "cooldown", 90*time.Second)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("logged %d lines at warn, want 1: %q", len(lines), out.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil || rec["msg"] != "kept" || rec["cooldown"] != "1m30s" {
		t.Errorf("line = %s (%v), want msg kept and cooldown 1m30s", lines[0], err)
	}
}

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "": slog.LevelInfo,
		"warn": slog.LevelWarn, "error": slog.LevelError} {
		if got, err := logging.ParseLevel(in); err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := logging.ParseLevel("loud"); err == nil || !strings.Contains(err.Error(), `"loud"`) {
		t.Errorf("ParseLevel(loud) = %v, want an error quoting it", err)
	}
}
