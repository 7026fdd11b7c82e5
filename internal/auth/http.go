package auth

import (
	"context"
	"net/http"

	"google.golang.org/grpc/metadata"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// IdentifyHeader returns the identity of the bearer token in an HTTP
// request's Authorization header, or Unauthenticated: the check the tap
// makes on the gRPC listener, for the HTTP listener's front, which runs
// it before a request's body is read.
func (a *Authenticator) IdentifyHeader(h http.Header) (Identity, error) {
	return a.identify(metadata.MD{"authorization": h.Values("Authorization")})
}

// AuthorizeWatch returns PermissionDenied when id may not watch what req
// names: the check a gRPC Watch gets, for a watch served over HTTP. Watch
// is open to every role.
func AuthorizeWatch(id Identity, req *pb.WatchRequest) error { return checkBreakers(id, req) }

// EndOnRevoke calls end when a Set leaves the bearer token in h's
// Authorization header unknown, or known under another entry than id,
// and returns whether it did; it watches until ctx ends. A stream served
// over HTTP (GET /v1/watch) ends on it, as a gRPC Watch does.
func (a *Authenticator) EndOnRevoke(ctx context.Context, h http.Header, id Identity, end func()) (revoked func() bool) {
	return a.endOnRevoke(ctx, metadata.MD{"authorization": h.Values("Authorization")}, id, end)
}
