package server_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestGetPolicyShowsEveryFieldItsSourceAndNoSecret: the effective policy
// of a breaker a rule matches, each field's source, and its recovery
// check without the API key in its header or the credentials in its URL;
// GetPolicy sends no Redis command.
func TestGetPolicyShowsEveryFieldItsSourceAndNoSecret(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		set, err := policy.Parse([]byte(`
defaults:
  threshold: 4
  bare_rate_limit_wait: 90s
groups:
  - {name: search, members: ["` + b.Breaker("search:web") + `", "` + b.Breaker("search:news") + `"], max_open_fraction: 0.5}
breakers:
  - match: "` + b.Breaker("search:*") + `"
    cooldown_base: 10s
    alternatives: [cached_search]
    count_unrecognised: true
    recovery_check:
      http:
        url: https://admin:hunter2@status.example/health?key=sk-secret
        headers: {X-Api-Key: sk-live-secret}
`))
		if err != nil {
			t.Fatal(err)
		}
		d := daemontest.Start(t, b, store.Options{Policies: set})
		api := dial(t, d, "w1").API()
		b.ResetCounts()
		res, err := api.GetPolicy(context.Background(), &pb.GetPolicyRequest{Breaker: b.Breaker("search:web")})
		if err != nil {
			t.Fatal(err)
		}
		if n := b.Commands(); n != 0 {
			t.Errorf("GetPolicy sent %d Redis commands, want 0", n)
		}
		p := res.GetPolicy()
		if p.GetThreshold() != 4 || p.GetCooldownBaseMs() != 10000 || p.GetBareRateLimitWaitMs() != 90000 ||
			p.GetMinWorkers() != 2 || p.GetGroup() != "search" || p.GetMaxOpenFraction() != 0.5 ||
			len(p.GetAlternatives()) != 1 || p.GetRecoveryCheck().GetHttpExpectStatus() != 200 || !p.GetCountUnrecognised() {
			t.Errorf("GetPolicy = %v", p)
		}
		want := map[string]string{"threshold": "defaults", "bare_rate_limit_wait": "defaults", "min_workers": "default",
			"cooldown_base": `breakers[0] (match "` + b.Breaker("search:*") + `")`, "group": "groups[0] (2 members)",
			"count_unrecognised": `breakers[0] (match "` + b.Breaker("search:*") + `")`}
		for k, v := range want {
			if got := res.GetSources()[k]; got != v {
				t.Errorf("sources[%s] = %q, want %q", k, got, v)
			}
		}
		if n := len(res.GetSources()); n != len(policy.FieldNames())+1 {
			t.Errorf("%d sources, want one per policy field and the group (%d)", n, len(policy.FieldNames())+1)
		}
		text := protojson.Format(res)
		for _, secret := range []string{"hunter2", "admin", "sk-secret", "sk-live-secret"} {
			if strings.Contains(text, secret) {
				t.Errorf("GetPolicy shows %q: %s", secret, text)
			}
		}
		if got := p.GetRecoveryCheck().GetHttpHeaderNames(); len(got) != 1 || got[0] != "x-api-key" {
			t.Errorf("recovery check header names %v, want [x-api-key]", got)
		}

		// The same policy rides on an Allow that asks for it, and only then.
		for _, with := range []bool{true, false} {
			a, err := api.Allow(context.Background(), &pb.AllowRequest{Breaker: b.Breaker("search:web"), WorkerId: "w1", WithPolicy: with})
			if err != nil {
				t.Fatal(err)
			}
			want := p
			if !with {
				want = nil
			}
			if got := a.GetPolicy(); !proto.Equal(got, want) {
				t.Errorf("Allow with_policy %v: policy %v, want %v", with, got, want)
			}
		}
	})
}
