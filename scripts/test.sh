#!/usr/bin/env bash
# The one test command: every suite (Go, Python, TypeScript and the checks
# beside them), on a fresh machine as on CI. It installs what the tests
# need with apt-get when it is missing (one `apt-get update`, one install
# line), starts a Redis at BREAKERD_TEST_REDIS_ADDR (default
# 127.0.0.1:6379) unless one answers there, starts a Redis Cluster of its
# own, and prints the time each phase took.
#
#   scripts/test.sh            # everything
#   scripts/test.sh go python  # only the named phases (names: see `phases` below)
#
# .ci/run calls this script and nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:$HOME/go/bin"

# Debian packages the suites use; installed in one line when any is missing.
# command -> package
declare -A need=(
  [redis-server]=redis-server [redis-cli]=redis-tools [redis-sentinel]=redis-sentinel
  [docker-compose]=docker-compose [file]=file [curl]=curl [systemd-analyze]=systemd [python3]=python3-venv
  [node]=nodejs [npm]=npm [unzip]=unzip [promtool]=prometheus [chromium]=chromium
)

phase_start=0
phase() { phase_start=$(date +%s); echo "== ci: phase $1"; }
phase_done() { echo "== ci: phase $1 took $(( $(date +%s) - phase_start ))s"; }

install_missing() {
  local missing=() cmd
  for cmd in "${!need[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("${need[$cmd]}")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  echo "ci: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# The Go in use, and no older than go.mod's toolchain line: the release the
# project is built and tested with. GOTOOLCHAIN=local keeps go from
# fetching another toolchain (there is no network for it), so an older Go
# is reported here rather than half-working.
check_go() {
  export GOTOOLCHAIN=local
  go version
  local want have
  want=$(sed -n 's/^toolchain go//p' go.mod)
  have=$(go env GOVERSION | sed 's/^go//')
  if [ -z "$want" ]; then echo "ci: go.mod has no toolchain line"; exit 1; fi
  if [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -n1)" != "$want" ]; then
    echo "ci: Go $have is older than go.mod's toolchain go$want; install Go $want or later"
    exit 1
  fi
}

start_redis() {
  local addr=${BREAKERD_TEST_REDIS_ADDR:-127.0.0.1:6379}
  local host=${addr%:*} port=${addr##*:}
  if ! redis-cli -h "$host" -p "$port" ping >/dev/null 2>&1; then
    echo "ci: starting redis-server on $host:$port"
    mkdir -p /var/lib/redis
    redis-server --daemonize yes --bind "$host" --port "$port" --save "" --appendonly no --dir /var/lib/redis
    for _ in $(seq 50); do redis-cli -h "$host" -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  fi
  redis-cli -h "$host" -p "$port" ping
  export BREAKERD_TEST_REDIS_ADDR=$addr
}

# The cluster tier: a Redis Cluster of 3 masters and 3 replicas of this
# run's own (testredis.Each's "cluster" backend runs the store, server,
# hooks and client suites on it); the failover tests start clusters and a
# Sentinel setup of their own on free ports. Client ports 20000-21999, bus
# ports (+10000) 30000-31999: below Linux's ephemeral range, where an
# outgoing connection could hold one. A random base keeps parallel runs
# apart (REDIS_CLUSTER_PORT pins it); a port already taken fails the start,
# so another base is tried.
start_cluster() {
  export REDIS_CLUSTER_DIR=${REDIS_CLUSTER_DIR:-$(mktemp -d)}
  trap 'scripts/redis-cluster.sh stop' EXIT
  local pinned=${REDIS_CLUSTER_PORT:-} attempt cluster_env
  for attempt in 1 2 3; do
    export REDIS_CLUSTER_PORT=${pinned:-$((20000 + RANDOM % 1990))}
    if cluster_env=$(scripts/redis-cluster.sh start); then break; fi
    [ -n "$pinned" ] || [ "$attempt" = 3 ] && { echo "ci: the Redis Cluster did not start"; exit 1; }
  done
  export "${cluster_env?}"
  echo "ci: $cluster_env"
}

# Static checks: formatting, vet, the proto's lint (buf is not packaged by
# Debian; the Go module proxy serves it, so go run builds it once into the
# module cache), and docker-compose.yml (Debian's docker-compose validates
# it without a container engine).
phase_lint() {
  local unformatted
  unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '\.pb\.go$'))
  if [ -n "$unformatted" ]; then echo "ci: gofmt would change: $unformatted"; exit 1; fi
  go vet ./...
  go run github.com/bufbuild/buf/cmd/buf@v1.75.0 lint proto
  echo "ci: buf lint is clean"
  check_proto_compatible
  docker-compose -f docker-compose.yml config -q
  echo "ci: docker-compose.yml is valid"
  check_no_binaries
}

# The proto changes only additively: buf breaking (rules FILE, from
# proto/buf.yaml) against the last tag, or the previous commit when there
# is no tag. It reads the repository through git itself (the common git
# directory, so a worktree works as a clone does) and needs the history:
# a shallow clone without the commit says so and skips.
check_proto_compatible() {
  local against
  against=$(git describe --tags --abbrev=0 2>/dev/null || true)
  [ -n "$against" ] || against=$(git rev-parse --verify -q HEAD~1 || true)
  if [ -z "$against" ] || ! git cat-file -e "$against^{commit}" 2>/dev/null; then
    echo "ci: buf breaking skipped: no previous commit in this clone (shallow?)"
    return 0
  fi
  go run github.com/bufbuild/buf/cmd/buf@v1.75.0 breaking proto \
    --against "$(git rev-parse --path-format=absolute --git-common-dir)#ref=$(git rev-parse "$against^{commit}"),subdir=proto"
  echo "ci: buf breaking is clean against $against"
}

# No tracked file is a compiled executable (ELF, Mach-O or PE): binaries
# are built, never committed (.gitignore lists the commands' names).
check_no_binaries() {
  local found
  found=$(git ls-files -z | xargs -0 file --no-pad --separator '|' | grep -E '\|.*(ELF|Mach-O|PE32)' || true)
  if [ -n "$found" ]; then echo "ci: compiled binaries are tracked; git rm them:"; echo "$found"; exit 1; fi
  echo "ci: no tracked file is a compiled binary"
}

# -timeout bounds a hung package, not a slow one: with two other copies of
# this suite on the same 2 cores, the outage replay's package took 15 to 18
# minutes and the failover tests 8 to 9.
phase_go() { go test -race -timeout 30m ./...; }

# The bounded soak, 60 s on each topology (cmd/breakerd-soak,
# docs/reliability.md): 2 daemons, 200 workers, 1,000 breakers, on a
# Sentinel setup of its own, then on a Redis Cluster of its own; each run
# kills a daemon, kills a master and restarts one without persistence,
# and exits non-zero on any violation its observer sees. Its load is
# paced, so each run takes about 70 s on 2 cores.
phase_soak() {
  local dir topology
  dir=$(mktemp -d)
  go build -o "$dir/breakerd-soak" ./cmd/breakerd-soak
  for topology in sentinel cluster; do
    "$dir/breakerd-soak" --topology "$topology" --duration 60s
  done
  rm -rf "$dir"
}

# The Python client (clients/python, docs/python.md): a venv of its own
# (clients/python/.venv) with the pinned test tools and frameworks from
# PyPI, mypy --strict on the package, pytest (its tests build breakerd
# from this tree and start daemons on free ports), then the wheel built,
# installed into a fresh venv and imported. pytest's exit code 5 (no
# tests collected) is a failure here, not a pass.
phase_python() {
  local dir=clients/python venv=clients/python/.venv rc=0 tmp out
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$dir/requirements-test.txt" -e "$dir"
  (cd "$dir" && .venv/bin/mypy --strict --python-version 3.10)
  (cd "$dir" && .venv/bin/pytest -q -p no:cacheprovider) || rc=$?
  if [ "$rc" = 5 ]; then echo "ci: pytest collected no tests in $dir"; exit 1; fi
  [ "$rc" = 0 ] || exit "$rc"
  tmp=$(mktemp -d)
  if ! out=$("$venv/bin/python" -m build --outdir "$tmp/dist" "$dir" 2>&1); then echo "$out"; exit 1; fi
  "$venv/bin/python" -m zipfile -l "$tmp"/dist/*.whl | grep 'breakerd/py.typed' >/dev/null || { echo "ci: the wheel lacks py.typed"; exit 1; }
  python3 -m venv "$tmp/venv"
  "$tmp/venv/bin/pip" install -q --disable-pip-version-check "$tmp"/dist/*.whl
  (cd "$tmp" && venv/bin/python -c 'import breakerd, breakerd._render as r; r.template("tool_result"); r.template("notice"); print("ci: the wheel installs; breakerd imports and reads its templates")')
  rm -rf "$tmp"
}

# Releases, as a user gets them: in a clone of this commit tagged
# v0.0.0-ci, `make build` gives every binary the tag as its --version and
# in breakerd_build_info, and `make release` cross-compiles every platform
# with checksums that verify. Built without -race, on the build cache.
phase_release() {
  local dir tag=v0.0.0-ci
  dir=$(mktemp -d)
  git clone -q --no-checkout . "$dir/clone"
  git -C "$dir/clone" checkout -q "$(git rev-parse HEAD)"
  git -C "$dir/clone" tag "$tag"
  (cd "$dir/clone" && make -s build >/dev/null && check_versions "$tag" bin && make -s release >/dev/null && check_release "$tag" dist)
  rm -rf "$dir"
}

# check_versions TAG DIR: every binary in DIR answers --version with TAG
# and this commit, and breakerd's breakerd_build_info gauge says the same.
check_versions() {
  local tag=$1 dir=$2 commit b want got log addr pid
  commit=$(git rev-parse --short=12 HEAD)
  for b in "$dir"/*; do
    want="$(basename "$b") $tag (commit $commit, "
    got=$("$b" --version)
    case "$got" in "$want"*) ;; *) echo "ci: $b --version printed \"$got\", want \"$want...\""; return 1 ;; esac
  done
  log=$(mktemp)
  "$dir/breakerd" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 2>"$log" &
  pid=$!
  for _ in $(seq 100); do grep -q 'serving metrics' "$log" && break; sleep 0.1; done
  addr=$(sed -n 's/.*serving metrics.*addr=\(http:[^ ]*\).*/\1/p' "$log")
  got=$(curl -fsS "$addr" | grep '^breakerd_build_info' || true)
  kill "$pid"; wait "$pid" || true; rm -f "$log"
  case "$got" in *"version=\"$tag\""*) ;; *) echo "ci: breakerd_build_info is \"$got\", want version=\"$tag\""; return 1 ;; esac
  echo "ci: $(ls "$dir" | wc -l) binaries and breakerd_build_info say $tag (commit $commit)"
}

# check_release TAG DIR: a tarball per platform, each binary built for it,
# the clients' wheel and npm tarball versioned from TAG (v0.0.0-ci: PEP
# 440's 0.0.0+ci, semver's 0.0.0-ci), and SHA256SUMS verifies.
check_release() {
  local tag=$1 dir=$2 platform want t b got npmv=${1#v} pyv
  (cd "$dir" && sha256sum --quiet -c SHA256SUMS)
  for platform in linux_amd64:"ELF 64-bit.*x86-64" linux_arm64:"ELF 64-bit.*aarch64" darwin_amd64:"Mach-O 64-bit.*x86_64" darwin_arm64:"Mach-O 64-bit.*arm64"; do
    t="$dir/breakerd_${tag}_${platform%%:*}.tar.gz"
    want=${platform#*:}
    [ -f "$t" ] || { echo "ci: make release wrote no $t"; return 1; }
    tar -xzf "$t" -C "$dir"
    for b in breakerd breakerctl breakerd-mcp healthcheck; do
      file "$dir/breakerd_${tag}_${platform%%:*}/$b" | grep -Eq "$want" || { echo "ci: $b in $t is not $want"; return 1; }
    done
  done
  pyv=${npmv/-/+}
  t="$dir/breakerd-$pyv-py3-none-any.whl"
  got=$(unzip -p "$t" "breakerd-$pyv.dist-info/METADATA" 2>/dev/null | sed -n 's/^Version: //p')
  [ "$got" = "$pyv" ] || { echo "ci: $t says Version \"$got\", want \"$pyv\""; return 1; }
  t="$dir/breakerd-client-$npmv.tgz"
  got=$(tar -xzOf "$t" package/package.json 2>/dev/null | node -p 'JSON.parse(require("fs").readFileSync(0, "utf8")).version' || true)
  [ "$got" = "$npmv" ] || { echo "ci: $t says version \"$got\", want \"$npmv\""; return 1; }
  grep -q " breakerd-$pyv-py3-none-any.whl$" "$dir/SHA256SUMS" && grep -q " breakerd-client-$npmv.tgz$" "$dir/SHA256SUMS" ||
    { echo "ci: SHA256SUMS misses the wheel or the npm tarball"; return 1; }
  echo "ci: make release: 4 platforms, wheel $pyv, npm $npmv, checksums verified"
}

# Deployment files, checked offline: the Kubernetes manifests decode
# strictly into k8s.io/api types (deploy/kubernetes/check, a module of its
# own, built without -race), and the systemd unit passes
# `systemd-analyze verify` with no warning and an exposure score of at
# most 2.0 (`systemd-analyze security`). docker-compose.yml is the lint
# phase's.
phase_deploy() {
  (cd deploy/kubernetes/check && go test -count=1 ./...)
  local dir out
  dir=$(mktemp -d)
  go build -o "$dir/breakerd" ./cmd/breakerd
  sed "s|/usr/local/bin/breakerd|$dir/breakerd|" deploy/systemd/breakerd.service > "$dir/breakerd.service"
  out=$(systemd-analyze verify "$dir/breakerd.service" 2>&1)
  if [ -n "$out" ]; then echo "ci: systemd-analyze verify deploy/systemd/breakerd.service:"; echo "$out"; exit 1; fi
  if ! systemd-analyze security --offline=true --threshold=20 --no-pager "$dir/breakerd.service" >"$dir/security" 2>&1; then
    echo "ci: deploy/systemd/breakerd.service is exposed beyond 2.0:"; cat "$dir/security"; exit 1
  fi
  echo "ci: deploy/systemd/breakerd.service verifies; $(grep -o 'Overall exposure level.*' "$dir/security")"
  rm -rf "$dir"
}

# The TypeScript client (clients/typescript, docs/typescript.md): npm ci
# from the committed lock file (the compiler and the frameworks of the
# adapter tests, pinned exactly), the build, tsc --noEmit on the package
# and its tests, node --test against daemons built from this tree (one
# binary, built here), then npm pack installed into a fresh folder and
# imported (scripts/pack-check.sh), and examples/typescript run by its
# test against a daemon.
phase_typescript() {
  local dir=clients/typescript bin
  bin=$(mktemp -d)
  go build -o "$bin/breakerd" ./cmd/breakerd
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  (cd "$dir" && npm run --silent build && npm run --silent typecheck)
  (cd "$dir" && BREAKERD_BIN="$bin/breakerd" npm test)
  (cd "$dir" && scripts/pack-check.sh)
  (cd examples/typescript && npm ci --no-audit --no-fund --loglevel=error && BREAKERD_BIN="$bin/breakerd" npm test)
  rm -rf "$bin"
}

# The status page in a real browser (internal/httpapi/browsertest, a
# module of its own so that the main module does not depend on chromedp):
# Debian's Chromium, headless, without its sandbox (CI runs as root) and
# without background networking, driven against a breakerd built here.
phase_ui() {
  local bin
  bin=$(mktemp -d)
  go build -o "$bin/breakerd" ./cmd/breakerd
  (cd internal/httpapi/browsertest && go vet ./... &&
    BREAKERD_TEST_CHROMIUM=$(command -v chromium) BREAKERD_BIN="$bin/breakerd" go test -count=1 ./...)
  rm -rf "$bin"
}

# The alert rules and the Grafana dashboard (docs/operations.md, "Alert
# rules"): promtool checks the rules and runs their unit tests (each alert
# seen firing and quiet), and deploy/prometheus/check, a module of its own,
# holds every metric the rules and the dashboard name to the daemon's
# registry and every runbook link to docs/operations.md.
phase_prometheus() {
  promtool check rules deploy/prometheus/breakerd-alerts.yaml
  (cd deploy/prometheus && promtool test rules breakerd-alerts_test.yaml)
  (cd deploy/prometheus/check && go test -count=1 ./...)
}

phases=(lint go soak python typescript release deploy ui prometheus)
run_phase() {
  phase "$1"
  "phase_$1"
  phase_done "$1"
}

main() {
  local chosen=("$@")
  [ "${#chosen[@]}" -gt 0 ] || chosen=("${phases[@]}")
  phase setup
  install_missing
  check_go
  start_redis
  start_cluster
  phase_done setup
  local p
  for p in "${chosen[@]}"; do run_phase "$p"; done
}

main "$@"
