#!/usr/bin/env bash
# The MCP demo (docs/mcp.md): breakerd on its embedded Redis, two
# breakerd-mcp gateways (workers gw-1 and gw-2) in front of a failing
# example upstream (examples/mcp-flaky, started by each gateway over
# stdio), and agents on the MCP Go SDK printing what they see
# (examples/mcpdemo). Needs nothing but Go.
#
# Usage: scripts/demo-mcp.sh [--breakerd-port PORT] [--gateway-port1 PORT] [--gateway-port2 PORT]
#   flag              variable                default  listens on 127.0.0.1
#   --breakerd-port   DEMO_MCP_BREAKERD_PORT  7090     breakerd's gRPC port
#   --gateway-port1   DEMO_MCP_GATEWAY_PORT1  8091     gateway gw-1's Streamable HTTP port
#   --gateway-port2   DEMO_MCP_GATEWAY_PORT2  8092     gateway gw-2's Streamable HTTP port
set -euo pipefail
cd "$(dirname "$0")/.."
bport=${DEMO_MCP_BREAKERD_PORT:-7090}
gport1=${DEMO_MCP_GATEWAY_PORT1:-8091}
gport2=${DEMO_MCP_GATEWAY_PORT2:-8092}
usage() { sed -n '8,12p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --breakerd-port) bport=${2:?--breakerd-port needs a value}; shift 2 ;;
    --breakerd-port=*) bport=${1#*=}; shift ;;
    --gateway-port1) gport1=${2:?--gateway-port1 needs a value}; shift 2 ;;
    --gateway-port1=*) gport1=${1#*=}; shift ;;
    --gateway-port2) gport2=${2:?--gateway-port2 needs a value}; shift 2 ;;
    --gateway-port2=*) gport2=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "demo-mcp.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
gports=("$gport1" "$gport2")
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

"$work/breakerd" --listen "127.0.0.1:$bport" --config "$work/policy.yaml" 2>"$work/breakerd.log" &
for _ in $(seq 100); do
  grep -q "health SERVING" "$work/breakerd.log" && break
  sleep 0.1
done
grep -q "health SERVING" "$work/breakerd.log" || { cat "$work/breakerd.log"; exit 1; }
for i in 1 2; do
  "$work/breakerd-mcp" --config "$work/gateway.yaml" --breakerd "127.0.0.1:$bport" \
    --worker-id "gw-$i" --listen "127.0.0.1:${gports[i-1]}" 2>"$work/gw$i.log" &
done
for i in 1 2; do
  for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:${gports[i-1]}/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  curl -fsS "http://127.0.0.1:${gports[i-1]}/healthz" >/dev/null || { cat "$work/gw$i.log"; exit 1; }
done
go run ./examples/mcpdemo --gateway1 "http://127.0.0.1:$gport1/mcp" --gateway2 "http://127.0.0.1:$gport2/mcp" \
  --fail-file "$work/weather-down" --cooldown 2s
echo
echo "== gw-1's health: $(curl -sS "http://127.0.0.1:$gport1/healthz")"
