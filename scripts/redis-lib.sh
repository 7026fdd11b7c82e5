# redis-lib.sh: what scripts/redis-cluster.sh and redis-sentinel.sh share.
# Sourced, not run. Expects $dir (one folder per port, each with the
# server's redis.pid) and the array ports.

# stop ends every server of ports: SIGTERM, a wait of up to 5 s each, then
# SIGKILL.
stop() {
  local p pid
  for p in "${ports[@]}"; do
    pid=$(cat "$dir/$p/redis.pid" 2>/dev/null) || continue
    kill "$pid" 2>/dev/null || true
  done
  for p in "${ports[@]}"; do
    # Redis removes its pid file as it exits: a file gone now is a
    # process gone.
    pid=$(cat "$dir/$p/redis.pid" 2>/dev/null) || continue
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/$p/redis.pid"
  done
}
