package probe

import "testing"

func TestCooldown(t *testing.T) {
	const s, m = int64(1000), int64(60000)
	for _, tc := range []struct {
		base, cap, level, want int64
	}{
		{30 * s, 15 * m, 0, 30 * s},
		{30 * s, 15 * m, 1, m},
		{30 * s, 15 * m, 4, 8 * m},
		{30 * s, 15 * m, 5, 15 * m},
		{30 * s, 15 * m, 500, 15 * m},
		{m, m, 3, m},
		{10 * s, 25 * s, 2, 25 * s},
		{10 * s, 80 * s, 3, 80 * s},
	} {
		if got := Cooldown(tc.base, tc.cap, tc.level); got != tc.want {
			t.Errorf("Cooldown(%d, %d, %d) = %d, want %d", tc.base, tc.cap, tc.level, got, tc.want)
		}
	}
}

func TestJitter(t *testing.T) {
	for _, tc := range []struct {
		d    int64
		j    float64
		want int64
	}{
		{30000, 0, 30000},
		{30000, 0.1, 33000},
		{30000, 0.2 * 0.999, 35994},
		{7, 0.5, 10},
	} {
		if got := Jitter(tc.d, tc.j); got != tc.want {
			t.Errorf("Jitter(%d, %g) = %d, want %d", tc.d, tc.j, got, tc.want)
		}
	}
}

func TestLease(t *testing.T) {
	if !LeaseLive("tok", 101, 100) || LeaseLive("tok", 100, 100) || LeaseLive("", 200, 100) {
		t.Error("LeaseLive: a lease lives while until > now and only with a token")
	}
	if !Holds("tok", 3, "tok", 3) || Holds("tok", 2, "tok", 3) || Holds("", 3, "", 3) || Holds("x", 3, "tok", 3) {
		t.Error("Holds: only the live token at the live generation holds the probe")
	}
}

func TestNewToken(t *testing.T) {
	a, b := NewToken(), NewToken()
	if len(a) != 32 || a == b {
		t.Errorf("NewToken() = %q, %q: want two different 32-hex-digit tokens", a, b)
	}
}

// TestOpenPeriod: the schedule's step or the Retry-After, whichever is
// longer, then jittered.
func TestOpenPeriod(t *testing.T) {
	s := Schedule{Base: 10000, Cap: 80000, Jitter: 0.1}
	for _, tc := range []struct{ level, retryAfter, want int64 }{
		{0, 0, 11000}, {2, 0, 44000}, {0, 30000, 33000}, {9, 0, 88000}, {1, 5000, 22000},
	} {
		if got := s.OpenPeriod(tc.level, tc.retryAfter); got != tc.want {
			t.Errorf("OpenPeriod(%d, %d) = %d, want %d", tc.level, tc.retryAfter, got, tc.want)
		}
	}
}
