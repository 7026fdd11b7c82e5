package daemon

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestLimitFlagsAndEnvironment(t *testing.T) {
	none := func(string) string { return "" }
	c, err := ParseConfig(nil, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{MaxRecvBytes: 512 << 10, MaxConcurrentStreams: 256, KeepaliveMinTime: 10 * time.Second,
		WatchMaxStreams: 1000, WatchMaxStreamsPerToken: 32, NewBreakersPerMinute: 600, AlertsPerMinute: 60}
	if c.MaxRecvBytes != want.MaxRecvBytes || c.MaxConcurrentStreams != want.MaxConcurrentStreams || c.KeepaliveMinTime != want.KeepaliveMinTime ||
		c.WatchMaxStreams != want.WatchMaxStreams || c.WatchMaxStreamsPerToken != want.WatchMaxStreamsPerToken ||
		c.NewBreakersPerMinute != want.NewBreakersPerMinute || c.AlertsPerMinute != want.AlertsPerMinute {
		t.Errorf("defaults = %+v", c)
	}
	env := map[string]string{
		"BREAKERD_MAX_RECV_BYTES": "65536", "BREAKERD_MAX_CONCURRENT_STREAMS": "8", "BREAKERD_KEEPALIVE_MIN_TIME": "1m",
		"BREAKERD_WATCH_MAX_STREAMS": "0", "BREAKERD_WATCH_MAX_STREAMS_PER_TOKEN": "3",
		"BREAKERD_NEW_BREAKERS_PER_MINUTE": "10", "BREAKERD_ALERTS_PER_MINUTE": "0",
		"BREAKERD_REDIS_URL": "redis://127.0.0.1:6379/0", "BREAKERD_REDIS_PASSWORD_FILE": "/run/secrets/pw",
	}
	c, err = ParseConfig([]string{"--watch-max-streams-per-token", "4"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil || c.MaxRecvBytes != 65536 || c.MaxConcurrentStreams != 8 || c.KeepaliveMinTime != time.Minute ||
		c.WatchMaxStreams != 0 || c.WatchMaxStreamsPerToken != 4 || c.NewBreakersPerMinute != 10 || c.AlertsPerMinute != 0 ||
		c.RedisPasswordFile != "/run/secrets/pw" {
		t.Errorf("from env (and one flag) = %+v, %v", c, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-recv-bytes", "100"}, "--max-recv-bytes"},
		{[]string{"--max-concurrent-streams", "-1"}, "--max-concurrent-streams"},
		{[]string{"--keepalive-min-time", "-1s"}, "--keepalive-min-time"},
		{[]string{"--watch-max-streams", "-1"}, "--watch-max-streams"},
		{[]string{"--watch-max-streams-per-token", "-2"}, "--watch-max-streams-per-token"},
		{[]string{"--new-breakers-per-minute", "-1"}, "--new-breakers-per-minute"},
		{[]string{"--alerts-per-minute", "-1"}, "--alerts-per-minute"},
		{[]string{"--redis-password-file", "/x"}, "--redis-password-file: needs --redis-url"},
	} {
		if _, err := ParseConfig(tc.args, none, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%v) = %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
