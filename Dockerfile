# Multi-stage: a static breakerd on a distroless, non-root base.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -ldflags "-s -w -X main.version=${VERSION}" -o /out/breakerd ./cmd/breakerd \
 && CGO_ENABLED=0 go build -ldflags "-s -w" -o /out/healthcheck ./cmd/healthcheck \
 && CGO_ENABLED=0 go build -ldflags "-s -w" -o /out/breakerctl ./cmd/breakerctl

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/breakerd /out/healthcheck /out/breakerctl /usr/local/bin/
USER nonroot:nonroot
# 7070: gRPC; 9464: Prometheus metrics when BREAKERD_METRICS_LISTEN is set.
EXPOSE 7070 9464
HEALTHCHECK --interval=10s --timeout=3s --retries=3 CMD ["/usr/local/bin/healthcheck", "127.0.0.1:7070"]
ENTRYPOINT ["/usr/local/bin/breakerd"]
