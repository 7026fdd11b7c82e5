#!/usr/bin/env bash
# Start or stop a local Redis Cluster of 3 masters and 3 replicas on
# loopback, from the installed redis-server (no container engine).
#
#   scripts/redis-cluster.sh start   # prints BREAKERD_TEST_REDIS_CLUSTER_ADDRS=...
#   scripts/redis-cluster.sh stop
#   scripts/redis-cluster.sh status
#   scripts/redis-cluster.sh restart-node PORT  # start one node again, empty
#
# Environment (so that parallel runs do not collide):
#   REDIS_CLUSTER_PORT       first of 6 consecutive client ports (default 7000)
#   REDIS_CLUSTER_PORTS      or the 6 client ports, space-separated
#   REDIS_CLUSTER_BUS_PORTS  the 6 cluster bus ports (default: each port + 10000)
#   REDIS_CLUSTER_DIR        working directory: configs, logs, pid files
#                            (default ${TMPDIR:-/tmp}/breakerd-redis-cluster-<first port>)
#   REDIS_CLUSTER_NODE_TIMEOUT  cluster-node-timeout in ms (default 2000)
#
# Each node's pid is in $REDIS_CLUSTER_DIR/<port>/redis.pid: a failover test
# kills a master through it. Nothing is persisted (no RDB, no AOF):
# restart-node starts a killed node again with its cluster config
# (nodes.conf) and no data, a restart without persistence.
set -euo pipefail

cmd=${1:-}
base=${REDIS_CLUSTER_PORT:-7000}
read -r -a ports <<<"${REDIS_CLUSTER_PORTS:-$(seq -s ' ' "$base" $((base + 5)))}"
if [ "${#ports[@]}" -ne 6 ]; then
  echo "redis-cluster: need 6 ports, got ${#ports[@]}: ${ports[*]}" >&2
  exit 2
fi
if [ -n "${REDIS_CLUSTER_BUS_PORTS:-}" ]; then
  read -r -a bus <<<"$REDIS_CLUSTER_BUS_PORTS"
else
  bus=()
  for p in "${ports[@]}"; do bus+=($((p + 10000))); done
fi
dir=${REDIS_CLUSTER_DIR:-${TMPDIR:-/tmp}/breakerd-redis-cluster-${ports[0]}}
timeout_ms=${REDIS_CLUSTER_NODE_TIMEOUT:-2000}

addrs() {
  local out=() p
  for p in "${ports[@]}"; do out+=("127.0.0.1:$p"); done
  (IFS=,; echo "${out[*]}")
}

# shellcheck source=scripts/redis-lib.sh
. "$(dirname "$0")/redis-lib.sh"

start_node() { # index: start the node of ports[index] in its folder
  local p=${ports[$1]}
  redis-server --port "$p" --cluster-port "${bus[$1]}" --bind 127.0.0.1 \
    --cluster-enabled yes --cluster-config-file "$dir/$p/nodes.conf" \
    --cluster-node-timeout "$timeout_ms" --cluster-replica-validity-factor 0 \
    --cluster-require-full-coverage no --cluster-allow-reads-when-down no \
    --save "" --appendonly no --dir "$dir/$p" \
    --pidfile "$dir/$p/redis.pid" --logfile "$dir/$p/redis.log" --daemonize yes
}

wait_ok() {
  local p
  for _ in $(seq 300); do
    local ok=1
    for p in "${ports[@]}"; do
      redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || ok=0
    done
    [ "$ok" = 1 ] && return 0
    sleep 0.1
  done
  echo "redis-cluster: the cluster did not reach cluster_state:ok; logs in $dir/*/redis.log" >&2
  return 1
}

case "$cmd" in
start)
  command -v redis-server >/dev/null || { echo "redis-cluster: redis-server is not installed" >&2; exit 1; }
  stop
  for i in "${!ports[@]}"; do
    p=${ports[$i]}
    rm -rf "${dir:?}/$p"
    mkdir -p "$dir/$p"
    start_node "$i"
  done
  for p in "${ports[@]}"; do
    for _ in $(seq 100); do redis-cli -h 127.0.0.1 -p "$p" ping >/dev/null 2>&1 && break; sleep 0.05; done
    if ! redis-cli -h 127.0.0.1 -p "$p" ping >/dev/null 2>&1; then
      echo "redis-cluster: the node on port $p did not start:" >&2
      tail -3 "$dir/$p/redis.log" >&2
      stop
      exit 1
    fi
  done
  hosts=()
  for p in "${ports[@]}"; do hosts+=("127.0.0.1:$p"); done
  redis-cli --cluster create "${hosts[@]}" --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 ||
    { cat "$dir/create.log" >&2; stop; exit 1; }
  wait_ok || { stop; exit 1; }
  echo "BREAKERD_TEST_REDIS_CLUSTER_ADDRS=$(addrs)"
  ;;
stop)
  stop
  ;;
restart-node)
  for i in "${!ports[@]}"; do
    if [ "${ports[$i]}" = "${2:-}" ]; then
      start_node "$i"
      exit 0
    fi
  done
  echo "redis-cluster: restart-node: ${2:-} is none of the ports ${ports[*]}" >&2
  exit 2
  ;;
status)
  for p in "${ports[@]}"; do
    printf '127.0.0.1:%s ' "$p"
    redis-cli -h 127.0.0.1 -p "$p" role 2>/dev/null | head -1 || echo down
  done
  ;;
*)
  echo "usage: $0 start|stop|status|restart-node PORT  (see the header for the environment)" >&2
  exit 2
  ;;
esac
