# breakerd: make help lists the targets.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REDIS_ADDR ?= 127.0.0.1:6379

.PHONY: help build test test-redis lint proto demo up down compose-check ci

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-11s %s\n", $$1, $$2}'

build: ## build the binaries into bin/
	CGO_ENABLED=0 go build -ldflags "-s -w -X main.version=$(VERSION)" -o bin/ ./cmd/...

test: ## the README's test command (real-Redis tests skip unless BREAKERD_TEST_REDIS_ADDR is set)
	go test -race ./...

test-redis: ## the same tests, with the real-Redis tier on REDIS_ADDR (default 127.0.0.1:6379)
	BREAKERD_TEST_REDIS_ADDR=$(REDIS_ADDR) go test -race ./...

lint: ## gofmt, go vet and staticcheck
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'))" || (gofmt -l . && exit 1)
	go vet ./...
	go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

proto: ## regenerate the Go code from proto/ and check it is committed
	./scripts/gen-proto.sh
	git diff --exit-code -- proto/

demo: ## two daemons on the real Redis at BREAKERD_REDIS_URL trip, deny, probe and close
	./scripts/demo.sh

up: ## docker compose: Redis and two breakerd replicas (writes ./secrets first)
	./scripts/compose-secrets.sh
	docker compose up -d --build

down: ## stop the compose fleet
	docker compose down

compose-check: ## validate docker-compose.yml (Debian's docker-compose; no engine needed)
	docker-compose -f docker-compose.yml config -q

ci: ## what CI runs
	./.ci/run
