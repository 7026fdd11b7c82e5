package daemontest

import (
	"context"
	"sync"

	"google.golang.org/grpc"

	"github.com/breakerd/breakerd/internal/inproc"
)

// Counter counts the RPCs a daemon serves, by full method name
// ("/breakerd.v1.BreakerService/Allow"). It is safe for concurrent use.
type Counter struct {
	mu sync.Mutex
	n  map[string]int
}

// NewCounter returns an empty Counter.
func NewCounter() *Counter { return &Counter{n: map[string]int{}} }

// Get returns how many calls of the short method name ("Allow") were served.
func (c *Counter) Get(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n["/breakerd.v1.BreakerService/"+method]
}

// Total returns all calls served.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for _, n := range c.n {
		t += n
	}
	return t
}

func (c *Counter) add(method string) {
	c.mu.Lock()
	c.n[method]++
	c.mu.Unlock()
}

// Options returns the server options that make the count.
func (c *Counter) Options() []grpc.ServerOption {
	return []grpc.ServerOption{
		inproc.UnaryInterceptors(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			c.add(info.FullMethod)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			c.add(info.FullMethod)
			return h(srv, ss)
		}),
	}
}
