package savings

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/breakerd/breakerd/internal/policy"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Answer is the API's Savings response for counts read over win, each
// breaker's cost from its policy: breakers by calls avoided (most first,
// then by name), and the totals.
func Answer(counts map[string]Counts, win Window, policyOf func(string) policy.Policy) *pb.SavingsResponse {
	out := &pb.SavingsResponse{FromMs: win.From, ToMs: win.To}
	spend := map[string]float64{}
	for b, c := range counts {
		row := &pb.BreakerSavings{Breaker: b, DaemonDenials: c.DaemonDenials, ClientDenials: c.ClientDenials,
			ToolsRemoved: c.ToolsRemoved, CallsAvoided: c.Calls()}
		if cost := policyOf(b).CostPerCall; cost != nil {
			row.CostPerCall, row.Currency = cost.Amount, cost.Currency
			row.SpendAvoidedEstimate = cost.Estimate(c.Calls())
			spend[cost.Currency] += row.SpendAvoidedEstimate
		}
		out.Breakers = append(out.Breakers, row)
		out.CallsAvoided += c.Calls()
	}
	slices.SortFunc(out.Breakers, func(a, b *pb.BreakerSavings) int {
		if c := cmp.Compare(b.CallsAvoided, a.CallsAvoided); c != 0 {
			return c
		}
		return strings.Compare(a.Breaker, b.Breaker)
	})
	for _, cur := range slices.Sorted(maps.Keys(spend)) {
		out.Spend = append(out.Spend, &pb.SpendTotal{Currency: cur, SpendAvoidedEstimate: spend[cur]})
	}
	return out
}
