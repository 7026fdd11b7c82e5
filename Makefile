# breakerd: make help lists the targets.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
# Every binary's --version and breakerd_build_info read these (internal/buildinfo).
LDFLAGS := -s -w -X github.com/breakerd/breakerd/internal/buildinfo.version=$(VERSION) -X github.com/breakerd/breakerd/internal/buildinfo.commit=$(COMMIT)
REDIS_ADDR ?= 127.0.0.1:6379

.PHONY: help build release test test-unit test-redis lint proto demo up down compose-check ci

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build the binaries into bin/ (version and commit from git: bin/breakerd --version)
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

release: ## cross-compile breakerd, breakerctl, breakerd-mcp and healthcheck for linux and darwin (amd64, arm64; PLATFORMS="linux/amd64" for fewer) into dist/, with SHA256SUMS
	VERSION=$(VERSION) COMMIT=$(COMMIT) ./scripts/release.sh

test: ## the README's test command: every suite (scripts/test.sh; installs and starts Redis when missing)
	./scripts/test.sh

test-unit: ## the unit tier: go test ./... on miniredis, no Redis to start (CONTRIBUTING.md, "Test tiers", lists the heavy tiers)
	go test ./...

test-redis: ## the unit tier, with the real-Redis tier on REDIS_ADDR (default 127.0.0.1:6379)
	BREAKERD_TEST_REDIS_ADDR=$(REDIS_ADDR) go test -race ./...

lint: ## gofmt, go vet, staticcheck and buf lint (proto/; staticcheck and buf come through the Go module proxy)
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'))" || (gofmt -l . && exit 1)
	go vet ./...
	go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	go run github.com/bufbuild/buf/cmd/buf@v1.75.0 lint proto

proto: ## regenerate the Go code from proto/ and check it is committed (needs protoc)
	@command -v protoc >/dev/null 2>&1 || { echo "make proto needs protoc: apt-get install protobuf-compiler"; exit 1; }
	./scripts/gen-proto.sh
	git diff --exit-code -- proto/

demo: ## two daemons on the Redis at BREAKERD_REDIS_URL trip, deny, probe and close (ports DEMO_PORT1/2, default 7081/7082)
	@command -v redis-cli >/dev/null 2>&1 || echo "make demo: no redis-cli here; the demo needs a Redis at $${BREAKERD_REDIS_URL:-redis://127.0.0.1:6379/0}"
	./scripts/demo.sh

# COMPOSE is the compose command: `docker compose` (the plugin) when docker
# has it, else the standalone docker-compose. up and down need a container
# engine; compose-check only the compose command.
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || (command -v docker-compose >/dev/null 2>&1 && echo docker-compose))

up: ## docker compose: Redis and two breakerd replicas (writes ./secrets first; needs a container engine with compose)
	@test -n "$(COMPOSE)" || { echo "make up needs a container engine with compose: install docker (with the compose plugin) or docker-compose; without one, run 'go run ./cmd/breakerd' (embedded Redis) or 'make demo' (a local Redis)"; exit 1; }
	./scripts/compose-secrets.sh
	$(COMPOSE) up -d --build

down: ## stop the compose fleet
	@test -n "$(COMPOSE)" || { echo "make down needs docker compose or docker-compose, as make up does"; exit 1; }
	$(COMPOSE) down

compose-check: ## validate docker-compose.yml (needs docker-compose or docker compose; no engine needed for docker-compose)
	@test -n "$(COMPOSE)" || { echo "make compose-check needs docker-compose (apt-get install docker-compose) or docker compose"; exit 1; }
	$(COMPOSE) -f docker-compose.yml config -q

ci: ## what CI runs
	./.ci/run
