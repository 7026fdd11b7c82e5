package policy

import (
	"strings"
	"testing"
	"time"
)

func TestParseRecoveryCheck(t *testing.T) {
	s, err := Parse([]byte(`
breakers:
  - match: "search*"
    recovery_check_interval: 20s
    recovery_check:
      http: {method: head, url: "https://u:p@status.example/health?key=k", headers: {X-Api-Key: secret}}
  - match: "vec"
    recovery_check:
      grpc: {target: "vec:443", service: "v1.Search", plaintext: true}
      timeout: 2s
`))
	if err != nil {
		t.Fatal(err)
	}
	p := s.For("search1")
	h := p.RecoveryCheck.HTTP
	if p.CheckInterval() != 20*time.Second || p.RecoveryCheck.Timeout != DefaultRecoveryCheckTimeout ||
		h.Method != "HEAD" || h.ExpectStatus != 200 || h.Headers["X-Api-Key"] != "secret" {
		t.Errorf("search1: %+v %+v", p, h)
	}
	if d := p.RecoveryCheck.Describe(); strings.Contains(d, "u:p") || strings.Contains(d, "key=k") || strings.Contains(d, "secret") {
		t.Errorf("Describe carries a credential: %s", d)
	}
	if got := p.RecoveryCheck.String(); strings.Contains(got, "secret") || strings.Contains(got, "u:p") {
		t.Errorf("String carries a credential: %s", got)
	}
	g := s.For("vec")
	if g.CheckInterval() != DefaultRecoveryCheckInterval || g.RecoveryCheck.Timeout != 2*time.Second ||
		g.RecoveryCheck.GRPC == nil || !g.RecoveryCheck.GRPC.Plaintext || g.RecoveryCheck.GRPC.Service != "v1.Search" {
		t.Errorf("vec: %+v", g)
	}
	if s.For("other").RecoveryCheck != nil {
		t.Error("a breaker no rule gives a check has one")
	}
}

func TestParseRecoveryCheckErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"defaults: {recovery_check_interval: 10ms}", "defaults.recovery_check_interval: must be between"},
		{"defaults: {recovery_check: {timeout: 1s}}", "defaults.recovery_check: needs exactly one of http and grpc"},
		{"defaults: {recovery_check: {http: {url: 'http://x'}, grpc: {target: 'x:1'}}}", "defaults.recovery_check: needs exactly one"},
		{"defaults: {recovery_check: {http: {url: 'http://x'}, timeout: 30s}}", "defaults.recovery_check.timeout: must be below recovery_check_interval"},
		{"defaults: {recovery_check: {http: {url: 'ftp://x'}}}", "defaults.recovery_check.http.url: must be http:// or https://"},
		{"defaults: {recovery_check: {http: {}}}", "defaults.recovery_check.http.url: is required"},
		{"defaults: {recovery_check: {http: {url: 'http:///p'}}}", "defaults.recovery_check.http.url: has no host"},
		{"defaults: {recovery_check: {http: {url: 'http://x', method: POST}}}", "defaults.recovery_check.http.method: must be GET or HEAD"},
		{"defaults: {recovery_check: {http: {url: 'http://x', expect_status: 42}}}", "defaults.recovery_check.http.expect_status"},
		{"breakers: [{match: a, recovery_check: {grpc: {service: s}}}]", "breakers[0].recovery_check.grpc.target: is required"},
		{"defaults: {recovery_check: {http: {url: 'http://x', bogus: 1}}}", "unknown field bogus"},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s) = %v, want %q", tc.yaml, err, tc.want)
		}
	}
	// A URL's password never appears in an error.
	_, err := Parse([]byte("defaults: {recovery_check: {http: {url: 'ftp://u:sekrit@x'}}}"))
	if err == nil || strings.Contains(err.Error(), "sekrit") {
		t.Errorf("error %v carries the URL's password", err)
	}
}
