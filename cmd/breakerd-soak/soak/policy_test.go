package soak

import (
	"testing"

	"github.com/breakerd/breakerd/internal/policy"
)

// TestPolicyIsTheSoaksConstants: the policy file the daemons read says
// what the observer's rules assume.
func TestPolicyIsTheSoaksConstants(t *testing.T) {
	set, err := policy.Parse([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	p := set.Defaults()
	if p.Threshold != Threshold || p.MinWorkers != MinWorkers || p.CooldownBase != CooldownBase || p.CooldownCap != CooldownCap ||
		p.Jitter != Jitter || p.ProbeTimeout != ProbeTimeout || p.Retention() != Retention {
		t.Errorf("the soak's policy file reads %+v, want its constants", p)
	}
}
