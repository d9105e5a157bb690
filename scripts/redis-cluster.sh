#!/usr/bin/env bash
# A Redis Cluster of 3 masters (no replicas) on 127.0.0.1, for tests and local runs,
# with Debian's redis-server 7 (apt-get install redis-server). No persistence
# besides each node's nodes.conf (its identity and slots), so a node stopped and
# started again rejoins with its slots.
#
#   scripts/redis-cluster.sh start --port P --dir D   nodes on P, P+1, P+2 (data in D/P, D/P+1, ...);
#                                                     prints redis+cluster://127.0.0.1:P,...
#   scripts/redis-cluster.sh stop --port P --dir D    stops the three nodes
#   scripts/redis-cluster.sh stop-node --port N --dir D / start-node --port N --dir D   one node
set -euo pipefail

command=${1:-}
shift || true
port=7000
dir=${TMPDIR:-/tmp}/chatgql-redis-cluster
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
server=$(command -v redis-server || echo /usr/sbin/redis-server)
cli=$(command -v redis-cli || echo /usr/bin/redis-cli)

answers() { "$cli" -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG; }

start_node() {
  local p=$1
  mkdir -p "$dir/$p"
  "$server" --port "$p" --bind 127.0.0.1 --dir "$dir/$p" --daemonize yes \
    --pidfile "$dir/$p/redis.pid" --logfile "$dir/$p/redis.log" \
    --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
    --cluster-require-full-coverage no --save "" --appendonly no >/dev/null
  for _ in $(seq 100); do answers "$p" && return 0; sleep 0.05; done
  echo "redis-server on port $p did not start (see $dir/$p/redis.log)" >&2
  return 1
}

stop_node() {
  local p=$1
  local pid
  pid=$(cat "$dir/$p/redis.pid" 2>/dev/null || true)
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done
  kill -9 "$pid" 2>/dev/null || true
}

case "$command" in
  start)
    ports=("$port" $((port + 1)) $((port + 2)))
    for p in "${ports[@]}"; do start_node "$p"; done
    "$cli" --cluster create "${ports[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >/dev/null
    for _ in $(seq 200); do
      if "$cli" -p "$port" cluster info | grep -q 'cluster_state:ok'; then
        ok=1
        for p in "${ports[@]}"; do
          "$cli" -p "$p" cluster info | grep -q 'cluster_state:ok' || ok=0
        done
        if [ $ok = 1 ]; then
          echo "redis+cluster://127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
          exit 0
        fi
      fi
      sleep 0.05
    done
    echo "the cluster did not become ok" >&2
    exit 1
    ;;
  stop)
    for p in "$port" $((port + 1)) $((port + 2)); do stop_node "$p"; done
    ;;
  start-node) start_node "$port" ;;
  stop-node) stop_node "$port" ;;
  *) echo "usage: $0 start|stop|start-node|stop-node --port P --dir D" >&2; exit 2 ;;
esac
