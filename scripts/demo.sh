#!/usr/bin/env bash
# The README's demo: two breakerd daemons on one real Redis, two workers,
# one breaker tripped by quorum, denied through either daemon, then one
# probe out of 20 concurrent callers closes it.
#
# Usage: scripts/demo.sh [--redis-url URL] [--port1 PORT] [--port2 PORT] [--breaker NAME]
# Each flag has an environment variable, the flag winning:
#   --redis-url  BREAKERD_REDIS_URL  (default redis://127.0.0.1:6379/0): the Redis both daemons share
#   --port1      DEMO_PORT1          (default 7081): daemon 1's gRPC port on 127.0.0.1
#   --port2      DEMO_PORT2          (default 7082): daemon 2's gRPC port on 127.0.0.1
#   --breaker    DEMO_BREAKER        (default web_search): the breaker to trip
set -euo pipefail
cd "$(dirname "$0")/.."
redis_url=${BREAKERD_REDIS_URL:-redis://127.0.0.1:6379/0}
port1=${DEMO_PORT1:-7081}
port2=${DEMO_PORT2:-7082}
breaker=${DEMO_BREAKER:-web_search}
usage() { sed -n '6,11p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --redis-url) redis_url=${2:?--redis-url needs a value}; shift 2 ;;
    --redis-url=*) redis_url=${1#*=}; shift ;;
    --port1) port1=${2:?--port1 needs a value}; shift 2 ;;
    --port1=*) port1=${1#*=}; shift ;;
    --port2) port2=${2:?--port2 needs a value}; shift 2 ;;
    --port2=*) port2=${1#*=}; shift ;;
    --breaker) breaker=${2:?--breaker needs a value}; shift 2 ;;
    --breaker=*) breaker=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "demo.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

cat > "$work/policy.yaml" <<'YAML'
defaults:
  cooldown_base: 2s     # short, for the demo; production default is 30s
  cooldown_cap: 1m
YAML
go build -o "$work/breakerd" ./cmd/breakerd
i=0
for port in "$port1" "$port2"; do
  i=$((i + 1))
  "$work/breakerd" --listen "127.0.0.1:$port" --redis-url "$redis_url" \
    --config "$work/policy.yaml" 2>"$work/daemon$i.log" &
done
for i in 1 2; do
  for _ in $(seq 100); do
    grep -q "health SERVING" "$work/daemon$i.log" && break
    sleep 0.1
  done
  grep -q "health SERVING" "$work/daemon$i.log" || { cat "$work/daemon$i.log"; exit 1; }
done
go run ./examples/fleetdemo --daemon1 "127.0.0.1:$port1" --daemon2 "127.0.0.1:$port2" --breaker "$breaker"
