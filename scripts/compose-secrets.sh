#!/usr/bin/env bash
# Writes the secrets docker-compose.yml mounts, into ./secrets (or $1):
#   redis-password   the password of Redis's "breakerd" ACL user
#   redis-users.acl  Redis's ACL file: the default user off, "breakerd"
#                    with exactly the commands, keys and channels the
#                    daemon needs (docs/security.md's ACL), "healthcheck" with
#                    PING only
#   tokens.yaml      breakerd's tokens: one operator token, and one worker
#                    token per worker identity, each bound to that id alone
#   operator-token   the operator's token, for breakerctl --token-file
#   worker-token     the MCP gateway's token (worker id worker-mcp-1)
#   worker-<id>-token the token of each agent identity in $WORKERS
#                    (default: agent-1 agent-2), bound to worker id <id>
#   mcp-listen-token the token agents send to the MCP gateway
# One token per identity, never one shared by a worker-* glob: breakerd
# opens a circuit only on failures from two distinct workers, and a token
# that may speak as any worker id can be that quorum alone (docs/operations.md).
# It never overwrites a file that exists. The files are 0644: the
# containers read them as non-root users other than their owner (compose
# bind-mounts file secrets with the host's modes). breakerd warns about a
# world-readable file; on a shared host chown them to the containers' users
# (breakerd 65532, redis 999) and chmod 0400 instead.
set -euo pipefail
dir="${1:-secrets}"
mkdir -p "$dir"
cd "$dir"
rand() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
write() { # name content
  if [ -e "$1" ]; then echo "compose-secrets: $dir/$1 exists; kept"; return; fi
  (umask 022; printf '%s\n' "$2" > "$1")
  chmod 0644 "$1"
  echo "compose-secrets: wrote $dir/$1"
}
[ -e redis-password ] || write redis-password "$(rand)"
pw=$(cat redis-password)
[ -e healthcheck-password ] || write healthcheck-password "$(rand)"
hpw=$(cat healthcheck-password)
sha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
# The rules are internal/daemon's RedisACLRules(0); a test keeps them equal.
write redis-users.acl "user default off
user healthcheck on #$(sha "$hpw") resetkeys resetchannels -@all +ping
user breakerd on #$(sha "$pw") resetkeys ~brk:* ~breakerd:hooks:* resetchannels &breakerd:events* -@all +ping +script|load +script|exists +evalsha +eval +time +info +hgetall +hset +del +sadd +scard +pexpire +persist +xadd +publish +subscribe +scan +exists +xrevrange +xrange +xlen +zadd +zremrangebyscore +zcard +zscore +zrem +set +get +expire +hincrby +hmget +zrangebyscore +xgroup|create +xreadgroup +xautoclaim +xpending +xclaim +xack"
[ -e operator-token ] || write operator-token "$(rand)"
[ -e worker-token ] || write worker-token "$(rand)"
[ -e mcp-listen-token ] || write mcp-listen-token "$(rand)"
workers="${WORKERS:-agent-1 agent-2}"
entries=""
for id in $workers; do
  case "$id" in *[!A-Za-z0-9._-]*|"") echo "compose-secrets: WORKERS: $id is not a worker id" >&2; exit 2;; esac
  [ -e "worker-$id-token" ] || write "worker-$id-token" "$(rand)"
  entries="$entries
  - name: worker-$id
    role: worker
    token_sha256: \"$(sha "$(cat "worker-$id-token")")\"
    workers: [\"$id\"]"
done
write tokens.yaml "tokens:
  - name: operator
    role: operator
    token_sha256: \"$(sha "$(cat operator-token)")\"
  - name: worker-mcp-1
    role: worker
    token_sha256: \"$(sha "$(cat worker-token)")\"
    workers: [\"worker-mcp-1\"]$entries"
