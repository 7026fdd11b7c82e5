#!/usr/bin/env bash
# The README's demo: two breakerd daemons on one real Redis, two workers,
# one breaker tripped by quorum, denied through either daemon, then one
# probe out of 20 concurrent callers closes it. Needs a Redis at
# $BREAKERD_REDIS_URL (default redis://127.0.0.1:6379/0).
set -euo pipefail
cd "$(dirname "$0")/.."
redis_url=${BREAKERD_REDIS_URL:-redis://127.0.0.1:6379/0}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

cat > "$work/policy.yaml" <<'YAML'
defaults:
  cooldown_base: 2s     # short, for the demo; production default is 30s
  cooldown_cap: 1m
YAML
go build -o "$work/breakerd" ./cmd/breakerd
for i in 1 2; do
  "$work/breakerd" --listen "127.0.0.1:708$i" --redis-url "$redis_url" \
    --config "$work/policy.yaml" 2>"$work/daemon$i.log" &
done
for i in 1 2; do
  for _ in $(seq 100); do
    grep -q "health SERVING" "$work/daemon$i.log" && break
    sleep 0.1
  done
  grep -q "health SERVING" "$work/daemon$i.log" || { cat "$work/daemon$i.log"; exit 1; }
done
go run ./examples/fleetdemo --daemon1 127.0.0.1:7081 --daemon2 127.0.0.1:7082 --breaker web_search
