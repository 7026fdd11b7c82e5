#!/usr/bin/env bash
# The README's MCP demo: breakerd on its embedded Redis, two breakerd-mcp
# gateways (workers gw-1 and gw-2) in front of a failing example upstream
# (examples/mcp-flaky, started by each gateway over stdio), and agents on
# the MCP Go SDK printing what they see (examples/mcpdemo). Needs nothing
# but Go.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

cat > "$work/policy.yaml" <<'YAML'
defaults:
  cooldown_base: 2s     # short, for the demo; production default is 30s
  cooldown_cap: 1m
  jitter: 0
YAML
go build -o "$work/breakerd" ./cmd/breakerd
go build -o "$work/breakerd-mcp" ./cmd/breakerd-mcp
go build -o "$work/mcp-flaky" ./examples/mcp-flaky
cat > "$work/gateway.yaml" <<YAML
upstreams:
  - name: weather
    command: ["$work/mcp-flaky", "--fail-file", "$work/weather-down"]
    timeout: 10s
YAML

"$work/breakerd" --listen 127.0.0.1:7090 --config "$work/policy.yaml" 2>"$work/breakerd.log" &
for _ in $(seq 100); do
  grep -q "health SERVING" "$work/breakerd.log" && break
  sleep 0.1
done
grep -q "health SERVING" "$work/breakerd.log" || { cat "$work/breakerd.log"; exit 1; }
for i in 1 2; do
  "$work/breakerd-mcp" --config "$work/gateway.yaml" --breakerd 127.0.0.1:7090 \
    --worker-id "gw-$i" --listen "127.0.0.1:809$i" 2>"$work/gw$i.log" &
done
for i in 1 2; do
  for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:809$i/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  curl -fsS "http://127.0.0.1:809$i/healthz" >/dev/null || { cat "$work/gw$i.log"; exit 1; }
done
go run ./examples/mcpdemo --gateway1 http://127.0.0.1:8091/mcp --gateway2 http://127.0.0.1:8092/mcp \
  --fail-file "$work/weather-down" --cooldown 2s
echo
echo "== gw-1's health: $(curl -sS http://127.0.0.1:8091/healthz)"
