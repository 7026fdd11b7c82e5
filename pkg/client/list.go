package client

import (
	"context"
	"time"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// ListEvery returns every breaker req's List answers, following its
// pages (req.PageSize breakers' keys each, 1 to 1000; req.PageToken is
// moved along), each breaker once: a page boundary can repeat one (Redis
// SCAN). Each page's call is bounded by pageTimeout, so a daemon that
// stalls on one page ends the listing with DeadlineExceeded. The first
// error is returned, with nothing listed.
func ListEvery(ctx context.Context, api pb.BreakerServiceClient, req *pb.ListRequest, pageTimeout time.Duration) ([]*pb.BreakerState, error) {
	var out []*pb.BreakerState
	seen := map[string]bool{}
	for {
		pctx, cancel := context.WithTimeout(ctx, pageTimeout)
		res, err := api.List(pctx, req)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, st := range res.GetStates() {
			if !seen[st.GetBreaker()] {
				seen[st.GetBreaker()] = true
				out = append(out, st)
			}
		}
		if req.PageToken = res.GetNextPageToken(); req.PageToken == "" {
			return out, nil
		}
	}
}
