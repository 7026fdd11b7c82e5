#!/usr/bin/env bash
# Regenerates the Go code from proto/ (checked in, so `go build` needs no protoc).
# Needs protoc (apt-get install protobuf-compiler); installs the Go plugins at
# pinned versions into $(go env GOPATH)/bin when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$(go env GOPATH)/bin"
command -v protoc >/dev/null || { echo "gen-proto: protoc missing: apt-get install protobuf-compiler" >&2; exit 1; }
command -v protoc-gen-go >/dev/null || go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
command -v protoc-gen-go-grpc >/dev/null || go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
protoc -I proto \
  --go_out=proto --go_opt=paths=source_relative \
  --go-grpc_out=proto --go-grpc_opt=paths=source_relative \
  proto/breakerd/v1/breaker.proto proto/breakerd/v1/watch_snapshot.proto
