// Package logging builds the slog loggers of breakerd's commands from
// their --log-format and --log-level flags, so every binary writes the
// same formats at the same levels.
package logging

import (
	"fmt"
	"io"
	"log/slog"
)

// ParseLevel reads a --log-level value (one of Levels; empty means info).
func ParseLevel(s string) (slog.Level, error) {
	switch s {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("must be debug, info, warn or error, got %q", s)
}

// CheckFormat reads a --log-format value (one of Formats; empty means
// text).
func CheckFormat(s string) error {
	if s == "text" || s == "json" || s == "" {
		return nil
	}
	return fmt.Errorf("must be text or json, got %q", s)
}

// New returns a logger writing format ("json", else text) to w, at level
// and above. Durations are written as Go duration strings ("1m0s",
// "250ms") in both formats: slog's JSON handler would write nanoseconds.
func New(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsStrings}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// durationsAsStrings is a slog ReplaceAttr that writes a time.Duration
// as its String form.
func durationsAsStrings(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}
