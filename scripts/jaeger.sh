#!/usr/bin/env bash
# Run a real Jaeger (an OTLP receiver, an in-memory trace store and its query API) on 127.0.0.1
# without Docker, for the tracing test (tests/tracing) and for looking at chatgql's traces by hand
# (docs/operating/tracing.md).
#
#   scripts/jaeger.sh build                          # build it (idempotent; minutes the first time)
#   scripts/jaeger.sh start  [--port 16686] [--dir DIR]
#   scripts/jaeger.sh stop   [--port 16686] [--dir DIR]
#   scripts/jaeger.sh status [--port 16686] [--dir DIR]
#
# Built with Go (1.24 or later) from scripts/jaeger/, a Go module whose one tool is
# github.com/jaegertracing/jaeger/cmd/jaeger, pinned with its dependencies by go.mod and go.sum,
# into CACHE/jaeger-<go.sum's hash>, CACHE being $CHATGQL_JAEGER_CACHE or else ~/.cache/chatgql/jaeger
# (outside the checkout: every clone of the machine shares the build). `start` runs it with an
# in-memory store (nothing is kept: every start is empty): the query API (/api/traces) on
# 127.0.0.1:PORT, OTLP over gRPC on PORT+1 and over HTTP on PORT+2, its health on PORT+3, the
# query's gRPC on PORT+4; it prints the OTLP/HTTP endpoint (http://127.0.0.1:PORT+2) once ready.
# DIR (default CACHE/run-PORT) holds config.yaml, jaeger.log and jaeger.pid. A binary built this
# way serves the query API and a placeholder page, not Jaeger's web UI (its assets are not in the
# Go module).
#
# Environment (all optional):
#   JAEGER_START_TIMEOUT=60   seconds to wait for it to be ready
#   JAEGER_STOP_TIMEOUT=15    seconds to wait after SIGTERM before SIGKILL
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODULE_DIR="$SCRIPT_DIR/jaeger"
CACHE_DIR="${CHATGQL_JAEGER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/chatgql/jaeger}"
BUILD_ID="$(sha256sum "$MODULE_DIR/go.sum" | cut -c1-16)"
BINARY="$CACHE_DIR/jaeger-$BUILD_ID"

PORT=16686
DIR=""

log() { echo "jaeger.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=lib/process.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/process.sh"

usage() { sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

parse_opts() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --port) [ $# -ge 2 ] || die "--port needs a value"; PORT="$2"; shift 2 ;;
      --port=*) PORT="${1#*=}"; shift ;;
      --dir) [ $# -ge 2 ] || die "--dir needs a value"; DIR="$2"; shift 2 ;;
      --dir=*) DIR="${1#*=}"; shift ;;
      -h|--help) usage; exit 0 ;;
      *) die "unknown option: $1" ;;
    esac
  done
  if ! [[ "$PORT" =~ ^[0-9]+$ ]] || [ "$PORT" -lt 1 ] || [ "$PORT" -gt 65530 ]; then
    die "bad --port: $PORT"
  fi
  [ -n "$DIR" ] || DIR="$CACHE_DIR/run-$PORT"
  DIR="$(realpath -m "$DIR")"
  PIDFILE="$DIR/jaeger.pid"
  LOGFILE="$DIR/jaeger.log"
}

# ---------------------------------------------------------------- build

cmd_build() {
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/.build.lock"  # one build at a time (CI jobs on one machine share the cache)
  flock 9
  if [ -x "$BINARY" ]; then
    exec 9>&-
    return 0
  fi
  command -v go >/dev/null 2>&1 || die "go not found on PATH (Jaeger is built from its Go module)"
  local t0=$SECONDS
  log "building github.com/jaegertracing/jaeger/cmd/jaeger (scripts/jaeger/go.mod) ..."
  if ! (cd "$MODULE_DIR" && go build -o "$BINARY.tmp" github.com/jaegertracing/jaeger/cmd/jaeger) \
      >"$CACHE_DIR/build.log" 2>&1; then
    tail -n 40 "$CACHE_DIR/build.log" >&2
    die "go build failed (log: $CACHE_DIR/build.log)"
  fi
  mv "$BINARY.tmp" "$BINARY"
  log "built in $((SECONDS - t0)) s: $BINARY"
  exec 9>&-
}

# ---------------------------------------------------------------- start

ready() {  # the health check extension answers 200
  local response
  response="$( (exec 3<>"/dev/tcp/127.0.0.1/$((PORT + 3))" && printf 'GET /status HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3 && head -1 <&3) 2>/dev/null || true)"
  [[ "$response" == *" 200"* ]]
}

write_config() {
  cat >"$DIR/config.yaml" <<EOF
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:$((PORT + 3))
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:$PORT
    grpc:
      endpoint: 127.0.0.1:$((PORT + 4))
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:$((PORT + 1))
      http:
        endpoint: 127.0.0.1:$((PORT + 2))
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
EOF
}

cmd_start() {
  parse_opts "$@"
  cmd_build
  local pid
  if pid="$(pid_from_file "$DIR/config.yaml")"; then
    ready && { log "already running (pid $pid, dir $DIR)"; echo "http://127.0.0.1:$((PORT + 2))"; return 0; }
    die "a Jaeger is already running from $DIR (pid $pid) but is not ready; run: $0 stop --port $PORT --dir $DIR"
  fi
  rm -f "$PIDFILE"
  for p in "$PORT" $((PORT + 1)) $((PORT + 2)) $((PORT + 3)) $((PORT + 4)); do
    port_open "$p" && die "port 127.0.0.1:$p is already in use by another process"
  done
  mkdir -p "$DIR"
  write_config
  echo "===== $(date -u +%FT%TZ) start (port $PORT) =====" >>"$LOGFILE"
  local t0=$SECONDS
  setsid nohup "$BINARY" --config "$DIR/config.yaml" </dev/null >>"$LOGFILE" 2>&1 &
  pid=$!
  echo "$pid" >"$PIDFILE"
  local timeout="${JAEGER_START_TIMEOUT:-60}"
  while ! ready; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PIDFILE"
      log "Jaeger exited during startup; last lines of $LOGFILE:"
      tail -n 40 "$LOGFILE" >&2
      exit 1
    fi
    if [ $((SECONDS - t0)) -ge "$timeout" ]; then
      log "not ready after ${timeout}s (pid $pid); last lines of $LOGFILE:"
      tail -n 40 "$LOGFILE" >&2
      stop_pid "$pid" "${JAEGER_STOP_TIMEOUT:-15}" || true
      exit 1
    fi
    sleep 0.2
  done
  log "ready in $((SECONDS - t0)) s (pid $pid, log $LOGFILE)"
  echo "http://127.0.0.1:$((PORT + 2))"
}

cmd_stop() {
  parse_opts "$@"
  local pid
  if ! pid="$(pid_from_file "$DIR/config.yaml")"; then
    rm -f "$PIDFILE"
    log "not running (dir $DIR)"
    return 0
  fi
  stop_pid "$pid" "${JAEGER_STOP_TIMEOUT:-15}"
  log "stopped pid $pid"
}

cmd_status() {
  parse_opts "$@"
  local pid
  if pid="$(pid_from_file "$DIR/config.yaml")"; then
    if ready; then echo "running pid=$pid query=http://127.0.0.1:$PORT otlp=http://127.0.0.1:$((PORT + 2)) dir=$DIR"
    else echo "starting-or-unresponsive pid=$pid dir=$DIR"
    fi
    return 0
  fi
  echo "stopped dir=$DIR"
  return 3
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  build) cmd_build ;;
  start) cmd_start "$@" ;;
  stop) cmd_stop "$@" ;;
  status) cmd_status "$@" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
