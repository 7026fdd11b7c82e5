package bench

import (
	"context"
	"fmt"
	"net"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// ceilingScript is the ceiling's one script: five commands, about what a
// lean breaker decision needs (read the state, read the clock, count,
// refresh a TTL, read the generation), with no argument parsing and a
// two-element reply.
//
// KEYS[1] -> bench:ceiling:{<breaker>}
// Returns {1, generation}.
var ceilingScript = redis.NewScript(`
local s = redis.call('HGET', KEYS[1], 'state')
local t = redis.call('TIME')
redis.call('HINCRBY', KEYS[1], 'n', 1)
redis.call('PEXPIRE', KEYS[1], 60000)
local g = redis.call('HGET', KEYS[1], 'gen')
return {1, tonumber(g) or 0}
`)

// ceilingServer answers Allow either at once (the gRPC no-op) or after one
// EVALSHA of ceilingScript (the ceiling a one-script-per-RPC daemon can
// reach on this machine).
type ceilingServer struct {
	pb.UnimplementedBreakerServiceServer
	rdb *redis.Client // nil: the no-op
}

var noopResponse = &pb.AllowResponse{Decision: pb.Decision_DECISION_ALLOWED, Ticket: &pb.Ticket{}}

func (s *ceilingServer) Allow(ctx context.Context, req *pb.AllowRequest) (*pb.AllowResponse, error) {
	if s.rdb == nil {
		return noopResponse, nil
	}
	res, err := ceilingScript.Run(ctx, s.rdb, []string{"bench:ceiling:{" + req.GetBreaker() + "}"}).Int64Slice()
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "ceiling: %v", err)
	}
	if len(res) != 2 {
		return nil, status.Errorf(codes.Internal, "ceiling: unexpected reply %v", res)
	}
	return &pb.AllowResponse{Decision: pb.Decision_DECISION_ALLOWED, Ticket: &pb.Ticket{Generation: res[1]}}, nil
}

// startCeiling serves a ceilingServer on a free loopback port until stop
// is called. rdb nil serves the no-op.
func startCeiling(rdb *redis.Client) (addr string, stop func(), err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("ceiling: %w", err)
	}
	g := grpc.NewServer()
	pb.RegisterBreakerServiceServer(g, &ceilingServer{rdb: rdb})
	go func() { _ = g.Serve(lis) }()
	return lis.Addr().String(), g.Stop, nil
}
