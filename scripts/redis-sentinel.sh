#!/usr/bin/env bash
# Start or stop a local Sentinel setup on loopback from the installed
# redis-server and redis-sentinel: one master, one replica and 3 sentinels
# watching it as "mymaster" (quorum 2).
#
#   scripts/redis-sentinel.sh start   # prints the --redis-url that reaches it
#   scripts/redis-sentinel.sh stop
#   scripts/redis-sentinel.sh status
#
# Environment (so that parallel runs do not collide):
#   REDIS_SENTINEL_PORT    first of 5 consecutive ports (default 26400):
#                          master, replica, then the 3 sentinels
#   REDIS_SENTINEL_PORTS   or the 5 ports, space-separated, in that order
#   REDIS_SENTINEL_DIR     working directory: configs, logs, pid files
#                          (default ${TMPDIR:-/tmp}/breakerd-redis-sentinel-<first port>)
#   REDIS_SENTINEL_DOWN_AFTER  down-after-milliseconds (default 1000)
#   REDIS_SENTINEL_MONITOR_PORT  the port the sentinels reach the master on
#                          (default the master's: another is a proxy to it)
#
# Pids are in $REDIS_SENTINEL_DIR/<port>/redis.pid. Nothing is persisted.
set -euo pipefail

cmd=${1:-}
base=${REDIS_SENTINEL_PORT:-26400}
read -r -a ports <<<"${REDIS_SENTINEL_PORTS:-$(seq -s ' ' "$base" $((base + 4)))}"
if [ "${#ports[@]}" -ne 5 ]; then
  echo "redis-sentinel: need 5 ports, got ${#ports[@]}: ${ports[*]}" >&2
  exit 2
fi
master=${ports[0]}
replica=${ports[1]}
sentinels=("${ports[@]:2}")
dir=${REDIS_SENTINEL_DIR:-${TMPDIR:-/tmp}/breakerd-redis-sentinel-${ports[0]}}
down_after=${REDIS_SENTINEL_DOWN_AFTER:-1000}

# shellcheck source=scripts/redis-lib.sh
. "$(dirname "$0")/redis-lib.sh"

server() { # port [extra args...]
  local p=$1
  shift
  rm -rf "${dir:?}/$p"
  mkdir -p "$dir/$p"
  redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir/$p" \
    --pidfile "$dir/$p/redis.pid" --logfile "$dir/$p/redis.log" --daemonize yes "$@"
}

case "$cmd" in
start)
  for b in redis-server redis-sentinel; do
    command -v "$b" >/dev/null || { echo "redis-sentinel: $b is not installed (apt-get install redis-server redis-sentinel)" >&2; exit 1; }
  done
  stop
  server "$master"
  server "$replica" --replicaof 127.0.0.1 "$master"
  for p in "${sentinels[@]}"; do
    rm -rf "${dir:?}/$p"
    mkdir -p "$dir/$p"
    # Sentinel rewrites its config file: each gets its own, writable.
    cat >"$dir/$p/sentinel.conf" <<EOF
port $p
bind 127.0.0.1
daemonize yes
dir $dir/$p
pidfile $dir/$p/redis.pid
logfile $dir/$p/redis.log
sentinel monitor mymaster 127.0.0.1 ${REDIS_SENTINEL_MONITOR_PORT:-$master} 2
sentinel down-after-milliseconds mymaster $down_after
sentinel failover-timeout mymaster 5000
sentinel parallel-syncs mymaster 1
EOF
    redis-sentinel "$dir/$p/sentinel.conf"
  done
  # Ready once the replica is in sync and every sentinel knows the other
  # two and the replica.
  for _ in $(seq 300); do
    ok=1
    redis-cli -p "$replica" info replication 2>/dev/null | grep -q '^master_link_status:up' || ok=0
    for p in "${sentinels[@]}"; do
      info=$(redis-cli -p "$p" sentinel master mymaster 2>/dev/null | paste -sd' ' -) || info=
      [[ "$info" == *"num-other-sentinels 2"* && "$info" == *"num-slaves 1"* ]] || ok=0
    done
    [ "$ok" = 1 ] && break
    sleep 0.1
  done
  if [ "$ok" != 1 ]; then
    echo "redis-sentinel: not ready; logs in $dir/*/redis.log" >&2
    stop
    exit 1
  fi
  echo "BREAKERD_REDIS_URL=redis://127.0.0.1:${sentinels[0]}/0?master_name=mymaster&addr=127.0.0.1:${sentinels[1]}&addr=127.0.0.1:${sentinels[2]}"
  ;;
stop)
  stop
  ;;
status)
  for p in "$master" "$replica"; do
    printf '127.0.0.1:%s ' "$p"
    redis-cli -p "$p" role 2>/dev/null | head -1 || echo down
  done
  for p in "${sentinels[@]}"; do
    printf '127.0.0.1:%s sentinel, master at ' "$p"
    redis-cli -p "$p" sentinel get-master-addr-by-name mymaster 2>/dev/null | paste -sd: - || echo down
  done
  ;;
*)
  echo "usage: $0 start|stop|status  (see the header for the environment)" >&2
  exit 2
  ;;
esac
