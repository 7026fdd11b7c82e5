package daemontest

import (
	"context"

	"github.com/breakerd/breakerd/internal/store"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// ListAll returns every breaker in states (all when none) that List
// answers, following its pages of store.MaxPageSize: a List without a
// page size answers only up to the daemon's unpaged limit, which a shared
// test Redis holding other runs' breakers may pass.
func ListAll(ctx context.Context, api pb.BreakerServiceClient, states ...pb.State) ([]*pb.BreakerState, error) {
	req := &pb.ListRequest{States: states, PageSize: store.MaxPageSize}
	var all []*pb.BreakerState
	for {
		res, err := api.List(ctx, req)
		if err != nil {
			return nil, err
		}
		all = append(all, res.GetStates()...)
		if req.PageToken = res.GetNextPageToken(); req.PageToken == "" {
			return all, nil
		}
	}
}
