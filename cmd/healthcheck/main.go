// Command healthcheck asks a gRPC server's grpc.health.v1 service whether
// it is SERVING and exits 0 if so, 1 otherwise. The container image uses it
// as its HEALTHCHECK (distroless images have no shell or curl).
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	addr := "127.0.0.1:7070"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	if err := check(addr); err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		os.Exit(1)
	}
}

func check(addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if res.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%s is %s", addr, res.Status)
	}
	return nil
}
