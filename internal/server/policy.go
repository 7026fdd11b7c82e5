package server

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/breakerd/breakerd/internal/policy"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// GetPolicy implements BreakerService.GetPolicy: the policy in force for
// the breaker, from the daemon's policy set (no Redis command), its
// recovery check without secrets.
func (s *Server) GetPolicy(ctx context.Context, req *pb.GetPolicyRequest) (*pb.GetPolicyResponse, error) {
	name := req.GetBreaker()
	if err := validName("breaker", name); err != nil {
		return nil, err
	}
	set := s.store.Policies()
	res := &pb.GetPolicyResponse{Breaker: name, Policy: effectivePolicy(set, name), Sources: set.Sources(name)}
	res.Sources["group"] = "default"
	if g, ok := set.GroupOf(name); ok {
		i := slices.IndexFunc(set.Groups(), func(x policy.Group) bool { return x.Name == g.Name })
		res.Sources["group"] = fmt.Sprintf("groups[%d] (%d members)", i, len(g.Members))
	}
	return res, nil
}

// effectivePolicy is name's policy in set as the API shows it, with its
// group's (GetPolicyResponse.policy, AllowResponse.policy).
func effectivePolicy(set *policy.Set, name string) *pb.Policy {
	p := policyProto(set.For(name))
	if g, ok := set.GroupOf(name); ok {
		p.Group, p.MaxOpenFraction = g.Name, g.MaxOpenFraction
	}
	return p
}

func msOf(d time.Duration) int64 { return d.Milliseconds() }

// policyProto is p as the API shows it.
func policyProto(p policy.Policy) *pb.Policy {
	out := &pb.Policy{
		Threshold: int32(p.Threshold), MinWorkers: int32(p.MinWorkers), RateLimitTrips: int32(p.RateLimitTrips),
		CooldownBaseMs: msOf(p.CooldownBase), CooldownCapMs: msOf(p.CooldownCap), Jitter: p.Jitter,
		ProbeTimeoutMs: msOf(p.ProbeTimeout), PauseTtlMs: msOf(p.PauseTTL), Alternatives: p.Alternatives,
		Mode: p.Mode, WindowMs: msOf(p.Window), FailureRate: p.FailureRate, MinCalls: int32(p.MinCalls),
		SlowCallMs: msOf(p.SlowCall), SlowCallThreshold: int32(p.SlowCallThreshold), SlowCallRate: p.SlowCallRate,
		RecoveryCheck: recoveryProto(p.RecoveryCheck), RecoveryCheckIntervalMs: msOf(p.CheckInterval()),
		Parent: p.Parent, CountTowardParent: p.CountTowardParent, Shadow: p.Shadow,
		BareRateLimitWaitMs: msOf(p.BareWait()), CountUnrecognised: p.CountUnrecognised,
	}
	if c := p.CostPerCall; c != nil {
		out.CostPerCall, out.CostCurrency = c.Amount, c.Currency
	}
	return out
}

// recoveryProto is c without its secrets: the URL without credentials or
// query values (policy.RedactURL), header names without their values.
func recoveryProto(c *policy.RecoveryCheck) *pb.PolicyRecoveryCheck {
	if c == nil {
		return nil
	}
	out := &pb.PolicyRecoveryCheck{TimeoutMs: msOf(c.Timeout)}
	if h := c.HTTP; h != nil {
		out.HttpMethod, out.HttpUrl, out.HttpExpectStatus = h.Method, policy.RedactURL(h.URL), int32(h.ExpectStatus)
		for k := range h.Headers {
			out.HttpHeaderNames = append(out.HttpHeaderNames, strings.ToLower(k))
		}
		sort.Strings(out.HttpHeaderNames)
	}
	if g := c.GRPC; g != nil {
		out.GrpcTarget, out.GrpcService, out.GrpcPlaintext = g.Target, g.Service, g.Plaintext
	}
	return out
}
