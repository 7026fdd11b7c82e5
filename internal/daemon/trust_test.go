package daemon

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestListenBeyondLoopbackNeedsTokens(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string // error substring; "" for success
	}{
		{args: nil},
		{args: []string{"--listen", "[::1]:7070"}},
		{args: []string{"--listen", "0.0.0.0:7070"}, want: "--listen: 0.0.0.0:7070 is not a loopback address and no --tokens are set"},
		{args: []string{"--listen", ":7070"}, want: "--listen:"},
		{args: []string{"--listen", "0.0.0.0:7070", "--insecure-listen-any"}},
		{args: []string{"--listen", "0.0.0.0:7070", "--tokens", "tokens.yaml"}},
		{env: map[string]string{"BREAKERD_LISTEN": "0.0.0.0:7070", "BREAKERD_INSECURE_LISTEN_ANY": "true"}},
		{env: map[string]string{"BREAKERD_INSECURE_LISTEN_ANY": "sure"}, want: "BREAKERD_INSECURE_LISTEN_ANY:"},
		{args: []string{"--tls-cert", "c.pem"}, want: "--tls-cert: --tls-cert and --tls-key go together"},
		{args: []string{"--tls-key", "k.pem"}, want: "--tls-cert:"},
		{args: []string{"--tls-client-ca", "ca.pem"}, want: "--tls-client-ca: needs --tls-cert"},
		{args: []string{"--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-client-ca", "ca.pem", "--hooks", "h.yaml"}},
	} {
		c2, err := ParseConfig(c.args, env(c.env), &strings.Builder{})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("ParseConfig(%v, %v) = %v, want success", c.args, c.env, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("ParseConfig(%v, %v) = %v, want an error containing %q", c.args, c.env, err, c.want)
		case c.want == "" && len(c.args) > 0 && c.args[0] == "--tls-cert" && (c2.TLSClientCA != "ca.pem" || c2.HooksFile != "h.yaml"):
			t.Errorf("ParseConfig(%v) = %+v", c.args, c2)
		}
	}
}

// TestRedisURLWithTLSAndACLUser checks that --redis-url's parsing (go-redis's
// ParseURL, as connect uses it) keeps an ACL user, its password and TLS.
func TestRedisURLWithTLSAndACLUser(t *testing.T) {
	o, err := redis.ParseURL("rediss://breakerd:s3cret@redis.internal:6380/2")
	if err != nil {
		t.Fatal(err)
	}
	if o.Username != "breakerd" || o.Password != "s3cret" || o.Addr != "redis.internal:6380" || o.DB != 2 {
		t.Errorf("ParseURL = user %q password %q addr %q db %d; want breakerd s3cret redis.internal:6380 2", o.Username, o.Password, o.Addr, o.DB)
	}
	if o.TLSConfig == nil || o.TLSConfig.ServerName != "redis.internal" {
		t.Errorf("rediss:// TLS config = %+v, want one verifying redis.internal", o.TLSConfig)
	}
	plain, err := redis.ParseURL("redis://:pw@127.0.0.1:6379/0")
	if err != nil || plain.TLSConfig != nil || plain.Username != "" || plain.Password != "pw" {
		t.Errorf("redis:// = %+v, %v; want no TLS, no user, password pw", plain, err)
	}
}

// TestRedisOptionsForms reads the three --redis-url forms into the
// universal client's options: standalone, Cluster and Sentinel.
func TestRedisOptionsForms(t *testing.T) {
	for _, tc := range []struct {
		url     string
		cluster bool
		want    redis.UniversalOptions
		kind    string
	}{
		{url: "rediss://breakerd:s3cret@redis.internal:6380/2?dial_timeout=3s", kind: "*redis.Client",
			want: redis.UniversalOptions{Addrs: []string{"redis.internal:6380"}, DB: 2, Username: "breakerd", Password: "s3cret", DialTimeout: 3 * time.Second}},
		{url: "redis://u:p@10.0.0.1:7000?addr=10.0.0.2:7001&addr=10.0.0.3:7002", cluster: true, kind: "*redis.ClusterClient",
			want: redis.UniversalOptions{IsClusterMode: true, Addrs: []string{"10.0.0.1:7000", "10.0.0.2:7001", "10.0.0.3:7002"}, Username: "u", Password: "p"}},
		{url: "redis://su:sp@10.0.0.1:26379/1?master_name=mymaster&addr=10.0.0.2:26379&password=mp", kind: "*redis.Client",
			want: redis.UniversalOptions{MasterName: "mymaster", Addrs: []string{"10.0.0.1:26379", "10.0.0.2:26379"}, DB: 1,
				SentinelUsername: "su", SentinelPassword: "sp", Password: "mp"}},
	} {
		got, err := RedisOptions(tc.url, tc.cluster)
		if err != nil {
			t.Fatalf("RedisOptions(%q, %v): %v", tc.url, tc.cluster, err)
		}
		got.TLSConfig = nil
		if got.Addrs == nil || !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("RedisOptions(%q, %v) = %+v, want %+v", tc.url, tc.cluster, *got, tc.want)
		}
		c := redis.NewUniversalClient(got)
		if k := fmt.Sprintf("%T", c); k != tc.kind {
			t.Errorf("NewUniversalClient(RedisOptions(%q)) is a %s, want %s", tc.url, k, tc.kind)
		}
		_ = c.Close()
	}
	if _, err := RedisOptions("redis://h:26379?master_name=m", true); err == nil {
		t.Error("RedisOptions(master_name, cluster) = nil error, want one")
	}
	if _, err := RedisOptions("redis://h:6379?bogus=1", false); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("RedisOptions(bogus option) = %v, want an error naming it", err)
	}
}
