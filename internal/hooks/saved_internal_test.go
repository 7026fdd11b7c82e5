package hooks

import (
	"testing"
	"time"
)

func TestSpellWords(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {45 * time.Second, "45s"}, {22*time.Minute + 59*time.Second, "22m"},
		{3*time.Hour + 5*time.Minute, "3h5m"}, {52 * time.Hour, "2d4h"},
	} {
		if got := spellLength(c.d); got != c.want {
			t.Errorf("spellLength(%v) = %q, want %q", c.d, got, c.want)
		}
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 3700: "3,700", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
