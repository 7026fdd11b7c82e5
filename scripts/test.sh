#!/usr/bin/env bash
# The one test command: every suite (Go, Python, TypeScript and the checks
# beside them), on a fresh machine as on CI. It installs with apt-get what
# the phases asked for need when it is missing (one `apt-get update`, one
# install line), starts the Redis and the Redis Cluster those phases use on
# ports of this run's own, prints the time each phase took, and stops at
# exit everything it started.
#
#   scripts/test.sh            # everything; independent phases run side by side
#   scripts/test.sh go python  # only the named phases (names: see `phases` below)
#
# Environment:
#   BREAKERD_TEST_REDIS_ADDR  the Redis of the go, python, typescript and
#                             frameworks-latest phases: used as is when one answers there, else
#                             started there (and stopped at exit); unset, one
#                             is started on a free port of BREAKERD_TEST_PORTS
#   BREAKERD_TEST_PORTS       the range this run's Redis and Cluster client
#                             ports come from (default 20000-21999; the
#                             Cluster's bus ports are each + 10000)
#   REDIS_CLUSTER_PORT        pins the Cluster's first client port (6 in a row)
#   BREAKERD_TEST_SERIAL=1    run the phases one after another, in order
#   BREAKERD_TEST_RELEASE_ALL=1  the release phase builds every platform's
#                             tarball, not linux_amd64's only (phase_release)
#
# Each suite alone, without this script: `go test ./...` needs nothing
# (miniredis; BREAKERD_TEST_REDIS_ADDR adds the real-Redis tier); the
# Python and TypeScript suites need a breakerd build (they make one with
# go) and, for the shared-Redis tests, a Redis at BREAKERD_TEST_REDIS_ADDR:
# start one with `redis-server --port 6480 --save "" --appendonly no` and
# export BREAKERD_TEST_REDIS_ADDR=127.0.0.1:6480. Without it the Python
# suite runs each daemon on an embedded Redis and skips the tests that
# share one; the TypeScript suite stops at once and says so.
#
# .ci/run calls this script and nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:$HOME/go/bin"
# The daemons the suites start run on a lax decision bound: beside other
# suites a healthy Redis can be slower than the default 300 ms. The stall
# tests set their own bound.
export BREAKERD_REDIS_DECISION_TIMEOUT=${BREAKERD_REDIS_DECISION_TIMEOUT:-10s}

# Debian packages the suites use: command -> package.
declare -A need=(
  [redis-server]=redis-server [redis-cli]=redis-tools [redis-sentinel]=redis-sentinel
  [docker-compose]=docker-compose [file]=file [curl]=curl [systemd-analyze]=systemd [python3]=python3-venv
  [node]=nodejs [npm]=npm [unzip]=unzip [promtool]=prometheus [chromium]=chromium
)
# The commands each phase runs (keys of `need`).
declare -A phase_needs=(
  [lint]="file docker-compose"
  [go]="redis-server redis-cli redis-sentinel"
  [soak]="redis-server redis-cli redis-sentinel"
  [python]="python3 unzip redis-server redis-cli"
  [typescript]="node npm redis-server redis-cli"
  [frameworks-latest]="node npm redis-server redis-cli"
  [python-latest]="python3 redis-server redis-cli"
  [release]="file curl unzip node npm python3"
  [deploy]="systemd-analyze"
  [ui]="chromium"
  [prometheus]="promtool"
)

phase_start=0
phase() { phase_start=$(date +%s); echo "== ci: phase $1"; }
phase_done() { echo "== ci: phase $1 took $(( $(date +%s) - phase_start ))s"; }

# install_missing PHASE...: the packages of the named phases' commands
# that are not on PATH, in one apt-get line.
install_missing() {
  local -A missing=()
  local p cmd
  for p in "$@"; do
    for cmd in ${phase_needs[$p]}; do
      command -v "$cmd" >/dev/null 2>&1 || missing[${need[$cmd]}]=1
    done
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  echo "ci: installing ${!missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${!missing[@]}" >/dev/null
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

# What this run started, stopped by cleanup at exit: the Redis (not one
# that already answered), the Cluster, the background phases, scratch dirs.
started_redis="" started_cluster="" bg_pids=() scratch=()
cleanup() {
  local pid
  for pid in "${bg_pids[@]}"; do kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true; done
  [ -z "$started_cluster" ] || scripts/redis-cluster.sh stop >/dev/null 2>&1 || true
  if [ -n "$started_redis" ]; then
    redis-cli -h "${started_redis%:*}" -p "${started_redis##*:}" shutdown nosave >/dev/null 2>&1 || true
    echo "ci: stopped the redis-server on $started_redis"
  fi
  [ "${#scratch[@]}" -eq 0 ] || rm -rf "${scratch[@]}"
}
trap cleanup EXIT

# port_range: the first and last port of BREAKERD_TEST_PORTS. Below
# Linux's ephemeral range (32768-), where an outgoing connection could hold
# one; bus ports at + 10000 must stay within 65535.
port_range() {
  local r=${BREAKERD_TEST_PORTS:-20000-21999}
  lo=${r%-*} hi=${r#*-}
  if ! [[ $lo =~ ^[0-9]+$ && $hi =~ ^[0-9]+$ ]] || [ "$lo" -lt 1024 ] || [ $((hi - lo)) -lt 8 ] || [ "$hi" -gt 55535 ]; then
    echo "ci: BREAKERD_TEST_PORTS=$r: want LO-HI, 1024 <= LO, LO+8 <= HI <= 55535"; exit 1
  fi
}

# listening HOST PORT: something accepts connections there.
listening() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# start_redis: BREAKERD_TEST_REDIS_ADDR when one answers there; else a
# redis-server of this run's own there, or on a free port of the range.
start_redis() {
  local addr=${BREAKERD_TEST_REDIS_ADDR:-} host port attempt lo hi dir
  if [ -n "$addr" ] && redis-cli -h "${addr%:*}" -p "${addr##*:}" ping >/dev/null 2>&1; then
    echo "ci: using the Redis that answers at $addr"; return 0
  fi
  dir=$(mktemp -d); scratch+=("$dir")
  port_range
  for attempt in 1 2 3 4 5; do
    if [ -n "${BREAKERD_TEST_REDIS_ADDR:-}" ]; then addr=$BREAKERD_TEST_REDIS_ADDR
    else addr=127.0.0.1:$((lo + RANDOM % (hi - lo - 6))); fi
    host=${addr%:*} port=${addr##*:}
    listening "$host" "$port" && { [ -z "${BREAKERD_TEST_REDIS_ADDR:-}" ] && continue; echo "ci: $addr is taken and is no Redis"; exit 1; }
    echo "ci: starting redis-server on $addr"
    if redis-server --daemonize yes --bind "$host" --port "$port" --save "" --appendonly no --dir "$dir" \
      --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"; then
      started_redis=$addr
      for _ in $(seq 50); do redis-cli -h "$host" -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
      if redis-cli -h "$host" -p "$port" ping >/dev/null 2>&1; then export BREAKERD_TEST_REDIS_ADDR=$addr; return 0; fi
      cat "$dir/redis.log"
    fi
    [ -z "${BREAKERD_TEST_REDIS_ADDR:-}" ] || break
  done
  echo "ci: no redis-server started"; exit 1
}

# The cluster tier: a Redis Cluster of 3 masters and 3 replicas of this
# run's own (testredis.Each's "cluster" backend runs the store, server,
# hooks and client suites on it); the failover tests and the soak start
# clusters and Sentinel setups of their own on ports the kernel picks.
# Its 6 client ports are consecutive, from BREAKERD_TEST_PORTS; a random
# base keeps parallel runs apart (REDIS_CLUSTER_PORT pins it); a port
# already taken fails the start, so another base is tried.
start_cluster() {
  if [ -z "${REDIS_CLUSTER_DIR:-}" ]; then REDIS_CLUSTER_DIR=$(mktemp -d); scratch+=("$REDIS_CLUSTER_DIR"); fi
  export REDIS_CLUSTER_DIR
  local pinned=${REDIS_CLUSTER_PORT:-} attempt cluster_env lo hi
  port_range
  for attempt in 1 2 3; do
    export REDIS_CLUSTER_PORT=${pinned:-$((lo + RANDOM % (hi - lo - 6)))}
    started_cluster=$REDIS_CLUSTER_PORT
    if cluster_env=$(scripts/redis-cluster.sh start); then break; fi
    scripts/redis-cluster.sh stop >/dev/null 2>&1 || true
    started_cluster=""
    [ -n "$pinned" ] || [ "$attempt" = 3 ] && { echo "ci: the Redis Cluster did not start"; exit 1; }
  done
  export "${cluster_env?}"
  echo "ci: $cluster_env"
}

# Static checks: formatting, vet, staticcheck (as `make lint` runs it),
# deadcode, the proto's lint (buf is not packaged by Debian; the Go module
# proxy serves these tools, so go run builds each once into the module
# cache), and docker-compose.yml (Debian's docker-compose validates it
# without a container engine).
phase_lint() {
  local unformatted
  unformatted=$(git ls-files -z '*.go' | grep -zv '\.pb\.go$' | xargs -0r gofmt -l)
  if [ -n "$unformatted" ]; then echo "ci: gofmt would change: $unformatted"; exit 1; fi
  go vet ./...
  go run "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version" ./...
  echo "ci: staticcheck is clean"
  check_deadcode
  go run github.com/bufbuild/buf/cmd/buf@v1.75.0 lint proto
  echo "ci: buf lint is clean"
  check_proto_compatible
  docker-compose -f docker-compose.yml config -q
  echo "ci: docker-compose.yml is valid"
  check_no_binaries
}
# The tools' pinned versions (the Makefile's lint target names the same
# staticcheck): each builds with go.mod's toolchain.
staticcheck_version=v0.8.2
deadcode_version=v0.51.0

# check_deadcode: no function in cmd/ or internal/ that nothing reaches
# from a main or a test (deadcode -test). pkg/'s exported API is its
# users', and examples (_test.go) are documentation, so neither counts.
# deadcode_allowed names, as "FILE FUNC", the functions unreachable from
# this module that stay, each with its reason.
deadcode_allowed=(
  # deploy/prometheus/check, a module of its own, reads the daemon's metrics from it.
  "internal/daemon/daemon.go Registry"
)
check_deadcode() {
  local out found allowed
  out=$(go run "golang.org/x/tools/cmd/deadcode@$deadcode_version" -test ./...)
  found=$(echo "$out" | sed -E 's/^([^:]+):[0-9]+:[0-9]+: unreachable func: (.*)$/\1 \2/' |
    grep -Ev '_test\.go |^pkg/[^ ]+ ([A-Z][A-Za-z0-9_]*\.)?[A-Z][A-Za-z0-9_]*$' || true)
  for allowed in "${deadcode_allowed[@]}"; do
    found=$(grep -vxF "$allowed" <<<"$found" || true)
  done
  if [ -n "$found" ]; then echo "ci: deadcode: nothing calls these (delete them, or list one in deadcode_allowed with why):"; echo "$found"; exit 1; fi
  echo "ci: deadcode: every function in cmd/ and internal/ is reached"
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

# The go phase: the unit tier (every package with -race, on miniredis,
# the run's Redis and its Cluster) and each heavy tier, the tests that
# call testredis.Tier with its name, on the packages that hold them. Each
# tier is named and timed; a failed one fails the phase, after the others
# ran. The failover tier mostly waits on Redis processes of its own, so it
# runs beside the others, its output printed whole when it ends; the rest
# run one after another. CONTRIBUTING.md has their times.
declare -A go_tier_packages=(
  [replay]="./cmd/outage-replay/..."  # the outage replay's 120-run experiments and external daemons
  [bench]="./cmd/breakerbench/..."     # every benchmark scenario run once, tiny, checked by the wire
  [failover]="./internal/tests/failover"     # Cluster and Sentinel failovers, stalled masters
)
go_tiers=(replay bench)
go_tier_beside=failover
phase_go() {
  local tier bad=() log pid
  log=$(mktemp)
  # shellcheck disable=SC2086 # a tier's packages are words
  go_tier "$go_tier_beside" "$go_tier_beside" ${go_tier_packages[$go_tier_beside]} >"$log" 2>&1 &
  pid=$!
  go_tier unit differential ./... || bad+=(unit)  # with the differential test's 500 sequences
  for tier in "${go_tiers[@]}"; do
    # shellcheck disable=SC2086
    go_tier "$tier" "$tier" ${go_tier_packages[$tier]} || bad+=("$tier")
  done
  wait "$pid" || bad+=("$go_tier_beside")
  cat "$log"
  rm -f "$log"
  [ "${#bad[@]}" -eq 0 ] || { echo "ci: go tiers failed: ${bad[*]}"; return 1; }
}

# go_tier NAME TIERS PACKAGE...: go test -race on the packages with
# BREAKERD_TEST_TIERS=TIERS, timed. -timeout bounds a hung package, not a
# slow one: with two other copies of this suite on the same 2 cores, the
# outage replay's package took 15 to 18 minutes and the failover tests 8
# to 9.
go_tier() {
  local name=$1 tiers=$2 start rc=0
  shift 2
  start=$(date +%s)
  echo "== ci: go tier $name: go test -race ${*}${tiers:+ with BREAKERD_TEST_TIERS=$tiers}"
  BREAKERD_TEST_TIERS=$tiers go test -race -timeout 30m "$@" || rc=$?
  if [ "$rc" = 0 ]; then echo "== ci: go tier $name took $(( $(date +%s) - start ))s"
  else echo "== ci: go tier $name FAILED (exit $rc) after $(( $(date +%s) - start ))s"; fi
  return "$rc"
}

# The bounded soak, 60 s on each topology (cmd/breakerd-soak,
# docs/reliability.md): 2 daemons, 200 workers, 1,000 breakers, on a
# Sentinel setup of its own, then on a Redis Cluster of its own; each run
# kills a daemon, stalls a master, kills one and restarts one without
# persistence, and exits non-zero on any violation its observer sees. The
# stall is a blackholed link on Sentinel and replies late past the bound
# on the Cluster (the failover tier stalls each topology all three ways,
# SIGSTOP too). Its load is paced, so each run takes about 70 s on 2 cores.
# Its ports come from BREAKERD_TEST_PORTS, below the ephemeral range.
phase_soak() {
  local dir topology lo hi
  dir=$(mktemp -d)
  go build -o "$dir/breakerd-soak" ./cmd/breakerd-soak
  port_range
  for topology in sentinel:blackhole cluster:latency; do
    "$dir/breakerd-soak" --topology "${topology%%:*}" --stall-fault "${topology##*:}" --duration 60s --ports "$lo-$hi"
  done
  rm -rf "$dir"
}

# The Python client (clients/python, docs/python.md): a venv of its own
# (clients/python/.venv) with the pinned test tools and frameworks from
# PyPI, mypy --strict on the package, pytest (its tests build breakerd
# from this tree and start daemons on free ports), then the wheel and the
# sdist built and checked (check_python_dist), the wheel installed into a
# fresh venv and imported, and the quick start of docs/python.md run there
# as written against a daemon (quick_start_python). pytest's exit
# code 5 (no tests collected) is a failure here, not a pass.
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
  check_python_dist "$venv" "$tmp/dist"
  python3 -m venv "$tmp/venv"
  "$tmp/venv/bin/pip" install -q --disable-pip-version-check "$tmp"/dist/*.whl
  (cd "$tmp" && venv/bin/python -c 'import breakerd, breakerd._render as r; r.template("tool_result"); r.template("notice"); print("ci: the wheel installs; breakerd", breakerd.__version__, "imports and reads its templates")')
  quick_start_python "$tmp"
  examples_python "$venv" "$tmp/breakerd"
  rm -rf "$tmp"
}

# examples_python VENV BIN: each agent in examples/python (one per
# framework) run as its docstring says, by VENV's Python (the frameworks
# installed), starting its own daemon (BIN) since nothing serves the URL
# given; each must end with the vendor's count.
examples_python() {
  local venv=$1 bin=$2 ex out
  for ex in examples/python/*.py; do
    case $ex in */_*) continue ;; esac
    out=$(BREAKERD_BIN=$bin "$venv/bin/python" "$ex" --url http://127.0.0.1:9 --prefix "ci-$$-$(basename "$ex" .py):" 2>&1) ||
      { echo "$out"; echo "ci: $ex failed"; exit 1; }
    grep -q '^the payment vendor saw [0-9]* requests$' <<<"$out" || { echo "$out"; echo "ci: $ex did not finish its story"; exit 1; }
    echo "ci: $ex runs ($(grep -c '^run ' <<<"$out") agent runs)"
  done
}

# quick_start_python DIR: docs/python.md's quick start as a user runs it
# on a fresh machine: a daemon from this tree with its HTTP API (on a free
# port, not the page's 7071, which another run may hold), and the page's
# Python block, its URL swapped, run by DIR/venv (the wheel installed,
# nothing else) as a script of its own.
quick_start_python() {
  local dir=$1 log url pid out
  go build -o "$dir/breakerd" ./cmd/breakerd
  log="$dir/breakerd.log"
  "$dir/breakerd" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 2>"$log" &
  pid=$!
  for _ in $(seq 300); do grep -q 'serving the HTTP/JSON API' "$log" && break; sleep 0.1; done
  url=$(sed -n 's/.*serving the HTTP\/JSON API.*addr=\(http:[^ ]*\).*/\1/p' "$log")
  awk '/^```python$/{f=1; next} f && /^```$/{exit} f' docs/python.md | sed "s|http://127.0.0.1:7071|$url|" > "$dir/quickstart.py"
  out=$(cd "$dir" && venv/bin/python quickstart.py 2>&1) || true
  kill "$pid"; wait "$pid" || true
  [ "$out" = "refunded ch_42" ] || { echo "ci: docs/python.md's quick start printed \"$out\", want \"refunded ch_42\""; cat "$log"; exit 1; }
  echo "ci: docs/python.md's quick start runs as written on the wheel alone"
}

# check_python_dist VENV DIR: the wheel and the sdist in DIR pass `twine
# check --strict` (the long description renders on PyPI), carry the
# repository's LICENSE, py.typed and the project's URLs, and the long
# description links nothing relative (it must stand alone on PyPI).
check_python_dist() {
  local venv=$1 dir=$2 whl sdist meta
  whl=$(ls "$dir"/*.whl) sdist=$(ls "$dir"/*.tar.gz)
  "$venv/bin/twine" check --strict "$whl" "$sdist"
  grep -qx 'breakerd/py.typed' <<<"$(unzip -Z1 "$whl")" || { echo "ci: the wheel lacks py.typed"; exit 1; }
  unzip -p "$whl" '*.dist-info/licenses/LICENSE' | cmp -s - LICENSE || { echo "ci: the wheel's LICENSE is not the repository's"; exit 1; }
  tar -xzOf "$sdist" --wildcards '*/LICENSE' | cmp -s - LICENSE || { echo "ci: the sdist's LICENSE is not the repository's"; exit 1; }
  meta=$(unzip -p "$whl" '*.dist-info/METADATA')
  for f in 'Project-URL: Repository' 'Project-URL: Documentation' 'Project-URL: Issues' 'Author: ' 'Classifier: Programming Language :: Python :: 3.10'; do
    grep -q "^$f" <<<"$meta" || { echo "ci: the wheel's METADATA lacks \"$f\""; exit 1; }
  done
  if grep -E '\]\((\.|[a-z-]+\.md)' <<<"$meta"; then echo "ci: the long description has relative links"; exit 1; fi
  echo "ci: twine check passes; wheel and sdist carry LICENSE, the wheel $(unzip -Z1 "$whl" | wc -l) files with py.typed and the project's URLs"
}

# Releases, as a user gets them: in a clone of this commit tagged
# v0.0.0-ci, `make build` gives every binary the tag as its --version and
# in breakerd_build_info, and `make release` writes linux_amd64's tarball,
# the clients' wheel and npm tarball, with checksums that verify
# (check_release). darwin/arm64, which differs from it in both GOOS and
# GOARCH (the module's only build constraints are GOOS ones), is compiled
# for (every released command) but not linked or packed: a run proves it
# builds, not that its tarball is right. Each platform compiled costs a
# cold build cache about 80 s of two cores, so the other two are left to
# BREAKERD_TEST_RELEASE_ALL=1, with which `make release` builds and
# check_release checks all four. Built without -race, on the build cache.
phase_release() {
  local dir tag=v0.0.0-ci all="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64" full=linux/amd64 compiled=darwin/arm64 p
  [ "${BREAKERD_TEST_RELEASE_ALL:-}" != 1 ] || { full=$all; compiled=; }
  dir=$(mktemp -d)
  git clone -q --no-checkout . "$dir/clone"
  git -C "$dir/clone" checkout -q "$(git rev-parse HEAD)"
  git -C "$dir/clone" tag "$tag"
  (cd "$dir/clone" && make -s build >/dev/null && check_versions "$tag" bin &&
    make -s release PLATFORMS="$full" >/dev/null && check_release "$tag" dist "$full")
  for p in $compiled; do
    (cd "$dir/clone" && GOOS=${p%/*} GOARCH=${p#*/} CGO_ENABLED=0 go build -trimpath ./cmd/breakerd ./cmd/breakerctl ./cmd/breakerd-mcp ./cmd/healthcheck)
    echo "ci: the released commands compile for $p (not linked, not packed)"
  done
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
  echo "ci: $(find "$dir" -maxdepth 1 -type f | wc -l) binaries and breakerd_build_info say $tag (commit $commit)"
}

# check_release TAG DIR PLATFORMS: a tarball per platform (GOOS/GOARCH,
# space-separated), each binary built for it,
# the clients' wheel, sdist and npm tarball versioned from TAG (v0.0.0-ci:
# PEP 440's 0.0.0+ci, semver's 0.0.0-ci), and SHA256SUMS verifies.
check_release() {
  local tag=$1 dir=$2 platform want t b got npmv=${1#v} pyv
  local -A kind=([linux/amd64]="ELF 64-bit.*x86-64" [linux/arm64]="ELF 64-bit.*aarch64"
    [darwin/amd64]="Mach-O 64-bit.*x86_64" [darwin/arm64]="Mach-O 64-bit.*arm64")
  (cd "$dir" && sha256sum --quiet -c SHA256SUMS)
  for platform in $3; do
    want=${kind[$platform]}
    platform=${platform/\//_}
    t="$dir/breakerd_${tag}_${platform}.tar.gz"
    [ -f "$t" ] || { echo "ci: make release wrote no $t"; return 1; }
    tar -xzf "$t" -C "$dir"
    for b in breakerd breakerctl breakerd-mcp healthcheck; do
      file "$dir/breakerd_${tag}_${platform}/$b" | grep -Eq "$want" || { echo "ci: $b in $t is not $want"; return 1; }
    done
  done
  pyv=${npmv/-/+}
  t="$dir/breakerd-$pyv-py3-none-any.whl"
  got=$(unzip -p "$t" "breakerd-$pyv.dist-info/METADATA" 2>/dev/null | sed -n 's/^Version: //p')
  [ "$got" = "$pyv" ] || { echo "ci: $t says Version \"$got\", want \"$pyv\""; return 1; }
  t="$dir/breakerd-$pyv.tar.gz"
  got=$(tar -xzOf "$t" "breakerd-$pyv/PKG-INFO" 2>/dev/null | sed -n 's/^Version: //p')
  [ "$got" = "$pyv" ] || { echo "ci: $t says Version \"$got\", want \"$pyv\""; return 1; }
  t="$dir/breakerd-client-$npmv.tgz"
  got=$(tar -xzOf "$t" package/package.json 2>/dev/null | node -p 'JSON.parse(require("fs").readFileSync(0, "utf8")).version' || true)
  [ "$got" = "$npmv" ] || { echo "ci: $t says version \"$got\", want \"$npmv\""; return 1; }
  for t in "breakerd-$pyv-py3-none-any.whl" "breakerd-$pyv.tar.gz" "breakerd-client-$npmv.tgz"; do
    grep -q " $t$" "$dir/SHA256SUMS" || { echo "ci: SHA256SUMS misses $t"; return 1; }
  done
  echo "ci: make release: $3, wheel and sdist $pyv, npm $npmv, checksums verified"
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
# binary, built here), then scripts/pack-check.sh (the committed dist/ is
# what the build wrote, npm publish --dry-run, and the tarball and the
# committed directory, `npm install <path>` of a clone, each installed into
# a fresh folder, imported, required from CommonJS on this machine's Node
# and typed), and examples/typescript run by its test against a daemon.
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

# The TypeScript adapters on the newest majors of their frameworks: a copy
# of clients/typescript (and conformance/, which its tests read) in a
# scratch directory, npm ci from the lock file, then `npm install
# ai@latest @ai-sdk/otel@latest @openai/agents@latest` there (ai 7's
# OpenTelemetry is @ai-sdk/otel; the committed lock file is
# untouched), the build and tsc --strict over the package and its tests,
# and the adapter tests (the traced ones' OTLP receiver, otlpsink, built
# here) run on Node 22, fetched from the npm registry's
# `node` package (`ai` 7 and `openai` 7 declare Node 22 or later). A
# background phase beside typescript, on the run's Redis.
phase_frameworks-latest() {
  local tmp dir
  tmp=$(mktemp -d)
  dir="$tmp/repo/clients/typescript"
  mkdir -p "$dir" "$tmp/bin"
  go build -o "$tmp/bin/breakerd" ./cmd/breakerd
  go build -o "$tmp/bin/otlpsink" ./internal/tests/otlptest/otlpsink
  cp -r conformance "$tmp/repo/"
  (cd clients/typescript && cp -r package.json package-lock.json tsconfig.json tsconfig.test.json src test bench scripts "$dir/")
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error &&
    npm install --no-audit --no-fund --loglevel=error ai@latest @ai-sdk/otel@latest @openai/agents@latest &&
    node -e 'const v = (p) => JSON.parse(require("fs").readFileSync(`node_modules/${p}/package.json`, "utf8")).version;
      console.log(`ci: frameworks-latest: ai ${v("ai")}, @openai/agents ${v("@openai/agents")}`)' &&
    echo "ci: frameworks-latest: node $(npm exec --yes node@22 -- --version)" &&
    npx tsc -p tsconfig.json && npx tsc -p tsconfig.test.json &&
    BREAKERD_BIN="$tmp/bin/breakerd" BREAKERD_OTLPSINK_BIN="$tmp/bin/otlpsink" \
      npm exec --yes node@22 -- --test build/test/adapters.test.js build/test/types.test.js)
  rm -rf "$tmp"
}

# The Python adapters on the newest releases of their frameworks: a venv
# of its own in a scratch directory with the suite's pins, then
# `pip install -U` of langchain, langchain-core, langgraph and
# openai-agents there (requirements-test.txt is untouched), the versions
# printed, and the adapter tests and examples/python run on them. A
# background phase beside python, on the run's Redis.
phase_python-latest() {
  local tmp
  tmp=$(mktemp -d)
  go build -o "$tmp/breakerd" ./cmd/breakerd
  python3 -m venv "$tmp/venv"
  "$tmp/venv/bin/pip" install -q --disable-pip-version-check -r clients/python/requirements-test.txt ./clients/python
  "$tmp/venv/bin/pip" install -q --disable-pip-version-check -U langchain langchain-core langgraph openai-agents
  "$tmp/venv/bin/python" -c 'from importlib.metadata import version as v
print("ci: python-latest:", ", ".join(f"{p} {v(p)}" for p in ("langchain", "langchain-core", "langgraph", "openai-agents", "openai")))'
  (cd clients/python && BREAKERD_TEST_BIN="$tmp/breakerd" "$tmp/venv/bin/pytest" -q -p no:cacheprovider \
    tests/test_adapters.py tests/test_adapters_langchain.py tests/test_adapters_openai_agents.py \
    tests/test_otel_frameworks.py)
  examples_python "$tmp/venv" "$tmp/breakerd"
  rm -rf "$tmp"
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

phases=(lint go soak python python-latest typescript frameworks-latest release deploy ui prometheus)
# Two lanes run side by side, each phase after the one before: the
# foreground lane the go phase and then the short phases named with it,
# the background lane the others. The soak runs last, alone, once both
# lanes are done: its observer counts degraded answers and would read a
# starved host as Redis failing. On 2 cores the two lanes take about as
# long each (CONTRIBUTING.md has the times). Every line of a phase but
# go's is prefixed with "[phase] ".
foreground=" go frameworks-latest release deploy ui prometheus "
alone=" soak "

# run_phase PHASE: the phase in a subshell of its own, timed; a phase
# exits on its first failure (set -e, which bash would ignore inside a
# command whose status is tested: hence `&` and wait). Its status goes to
# $status_dir/PHASE; run_phase itself always succeeds, so a lane goes on.
run_phase() {
  local rc secs
  phase "$1"
  ( "phase_$1" ) &
  set +e; wait "$!"; rc=$?; set -e
  secs=$(( $(date +%s) - phase_start ))
  echo "$rc $secs" > "$status_dir/$1"
  if [ "$rc" = 0 ]; then echo "== ci: phase $1 took ${secs}s"; else echo "== ci: phase $1 FAILED (exit $rc) after ${secs}s"; fi
}

# run_lane PHASE...: the phases in order, each whatever the one before
# did, every line but the go phase's prefixed with its phase's name, and
# kept in $status_dir/PHASE.log for the summary.
run_lane() {
  local p
  for p in "$@"; do
    if [ "$p" = go ]; then run_phase "$p" 2>&1 | tee "$status_dir/$p.log"
    else run_phase "$p" 2>&1 | tee "$status_dir/$p.log" | sed -u "s/^/[$p] /"; fi
  done
}

# summary PHASE...: each phase's outcome and time, then the end of each
# failed phase's output (a lane's lines interleave, and a log viewer
# that shows only a run's last lines would miss why); fails if any failed.
summary() {
  local p rc secs failed=()
  echo "== ci: summary"
  for p in "$@"; do
    read -r rc secs < "$status_dir/$p" 2>/dev/null || { rc=unknown secs='?'; }
    if [ "$rc" = 0 ]; then echo "== ci:   $p ok ${secs}s"; else echo "== ci:   $p FAILED ${secs}s"; failed+=("$p"); fi
  done
  for p in "${failed[@]}"; do
    echo "== ci: the last 60 lines of $p's output"
    tail -n 60 "$status_dir/$p.log" 2>/dev/null || echo "(none kept)"
  done
  [ "${#failed[@]}" = 0 ] || { echo "== ci: FAILED"; for p in "${failed[@]}"; do echo "== ci:   $p FAILED"; done; exit 1; }
  echo "== ci: every phase passed"
}

main() {
  local chosen=("$@") p fg=() bg=() last=() total_start
  total_start=$(date +%s)
  [ "${#chosen[@]}" -gt 0 ] || chosen=("${phases[@]}")
  for p in "${chosen[@]}"; do
    [ -n "${phase_needs[$p]+x}" ] || { echo "ci: no phase $p; the phases: ${phases[*]}"; exit 2; }
    if [ "${BREAKERD_TEST_SERIAL:-}" = 1 ] || [[ $foreground == *" $p "* ]]; then fg+=("$p")
    elif [[ $alone == *" $p "* ]]; then last+=("$p"); else bg+=("$p"); fi
  done
  if [ "${#fg[@]}" -eq 0 ]; then fg=("${bg[@]}"); bg=(); fi
  status_dir=$(mktemp -d); scratch+=("$status_dir")
  phase setup
  install_missing "${chosen[@]}"
  check_go
  case " ${chosen[*]} " in *" go "*|*" python "*|*" python-latest "*|*" typescript "*|*" frameworks-latest "*) start_redis ;; esac
  case " ${chosen[*]} " in *" go "*) start_cluster ;; esac
  phase_done setup
  if [ "${#bg[@]}" -gt 0 ]; then
    set -m  # the lane in a process group of its own, so cleanup can end it whole
    run_lane "${bg[@]}" &
    bg_pids+=("$!")
    set +m
  fi
  run_lane "${fg[@]}"
  if [ "${#bg_pids[@]}" -gt 0 ]; then wait "${bg_pids[0]}" || true; bg_pids=(); fi
  [ "${#last[@]}" -eq 0 ] || run_lane "${last[@]}"
  echo "== ci: the run took $(( $(date +%s) - total_start ))s"
  summary "${chosen[@]}"
}

main "$@"
