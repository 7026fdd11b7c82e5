# Multi-stage: static binaries on a distroless, non-root base. The image
# runs breakerd by default; it also holds breakerctl, the healthcheck probe
# and the MCP gateway (docker-compose.yml's breakerd-mcp service runs it).
# The build stage is pinned by tag only: its digest is re-pushed with each
# Debian rebuild and could not be resolved here; nothing of it ships.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The build context has no .git (.dockerignore), so the binaries carry no
# VCS revision of their own: pass both, for example:
#   docker build --build-arg VERSION=$(git describe --tags --always) --build-arg COMMIT=$(git rev-parse --short=12 HEAD) .
ARG VERSION=dev
ARG COMMIT=unknown
RUN LDFLAGS="-s -w -X github.com/breakerd/breakerd/internal/buildinfo.version=${VERSION} -X github.com/breakerd/breakerd/internal/buildinfo.commit=${COMMIT}" \
 && CGO_ENABLED=0 go build -buildvcs=false -ldflags "$LDFLAGS" -o /out/ ./cmd/breakerd ./cmd/healthcheck ./cmd/breakerctl ./cmd/breakerd-mcp

# The shipped base, pinned by the nonroot tag's multi-arch digest.
FROM gcr.io/distroless/static-debian12:nonroot@sha256:b7bb25d9f7c31d2bdd1982feb4dafcaf137703c7075dbe2febb41c24212b946f
COPY --from=build /out/breakerd /out/healthcheck /out/breakerctl /out/breakerd-mcp /usr/local/bin/
USER nonroot:nonroot
# 7070: gRPC; 9464: Prometheus metrics when BREAKERD_METRICS_LISTEN is set.
EXPOSE 7070 9464
HEALTHCHECK --interval=10s --timeout=3s --retries=3 CMD ["/usr/local/bin/healthcheck", "127.0.0.1:7070"]
ENTRYPOINT ["/usr/local/bin/breakerd"]
