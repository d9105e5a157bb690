#!/usr/bin/env bash
# Run a real Keycloak (an OpenID Connect provider) on 127.0.0.1 without Docker, for the
# identity tests (tests/test_oidc.py) and for trying chatgql with one by hand.
#
#   scripts/keycloak.sh fetch                         # download and unpack (idempotent)
#   scripts/keycloak.sh start  [--port 18080] [--dir DIR]
#   scripts/keycloak.sh stop   [--port 18080] [--dir DIR]
#   scripts/keycloak.sh status [--port 18080] [--dir DIR]
#   scripts/keycloak.sh java                          # the Java 21+ it would run on (exit 1: none)
#
# The distribution (org.keycloak:keycloak-quarkus-dist, KEYCLOAK_VERSION) comes from Maven
# Central with `mvn` into CACHE/keycloak-VERSION, CACHE being $CHATGQL_KEYCLOAK_CACHE or else
# ~/.cache/chatgql/keycloak (outside the checkout: the download and its build step take minutes,
# and every clone of the machine, a CI run's clean one too, shares them). It needs Java 21 or later: JAVA_HOME
# when it is one, else `java` on PATH, else the newest JDK under /usr/lib/jvm.
# `fetch` also runs Keycloak's build step (for an in-memory database, health checks on), and
# `start` runs that build (production mode, plain HTTP; nothing is kept: every start is a
# fresh server), HTTP on 127.0.0.1:PORT, its management interface (health) on
# PORT+1, and an administrator KEYCLOAK_ADMIN / KEYCLOAK_ADMIN_PASSWORD (admin / admin) in
# the master realm; it prints the base URL (http://127.0.0.1:PORT) once it is ready. DIR
# (default CACHE/run-PORT) holds keycloak.log and keycloak.pid.
#
# Environment (all optional):
#   KEYCLOAK_VERSION=26.7.3
#   KEYCLOAK_HEAP=768m           max heap (-Xmx)
#   KEYCLOAK_START_TIMEOUT=600   seconds to wait for it to be ready
#   KEYCLOAK_STOP_TIMEOUT=30     seconds to wait after SIGTERM before SIGKILL
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
VERSION="${KEYCLOAK_VERSION:-26.7.3}"
CACHE_DIR="${CHATGQL_KEYCLOAK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/chatgql/keycloak}"
HOME_DIR="$CACHE_DIR/keycloak-$VERSION"
STAMP="$HOME_DIR/.fetched"
DEPENDENCY_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
BUILD_OPTIONS="--db=dev-mem --health-enabled=true"  # fixed by `kc.sh build` (fetch); start --optimized

PORT=18080
DIR=""

log() { echo "keycloak.sh: $*" >&2; }
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
  if ! [[ "$PORT" =~ ^[0-9]+$ ]] || [ "$PORT" -lt 1 ] || [ "$PORT" -gt 65534 ]; then
    die "bad --port: $PORT"
  fi
  MPORT=$((PORT + 1))
  [ -n "$DIR" ] || DIR="$CACHE_DIR/run-$PORT"
  DIR="$(realpath -m "$DIR")"
  PIDFILE="$DIR/keycloak.pid"
  LOGFILE="$DIR/keycloak.log"
}

# ---------------------------------------------------------------- fetch

is_fetched() { [ "$(cat "$STAMP" 2>/dev/null)" = "$VERSION $BUILD_OPTIONS" ] && [ -x "$HOME_DIR/bin/kc.sh" ]; }

cmd_fetch() {
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/.fetch.lock"  # one fetch at a time (CI jobs on one machine share the cache)
  flock 9
  if is_fetched; then
    log "Keycloak $VERSION already in $HOME_DIR"
    exec 9>&-
    return 0
  fi
  command -v mvn >/dev/null 2>&1 || die "mvn not found on PATH (needed to fetch Keycloak from Maven Central)"
  local t0=$SECONDS dl="$CACHE_DIR/dl"
  log "fetching org.keycloak:keycloak-quarkus-dist:$VERSION from Maven Central ..."
  if ! mvn -q -B "$DEPENDENCY_PLUGIN:copy" \
      -Dartifact="org.keycloak:keycloak-quarkus-dist:$VERSION:tar.gz" -DoutputDirectory="$dl" \
      >"$CACHE_DIR/fetch.log" 2>&1; then
    cat "$CACHE_DIR/fetch.log" >&2
    die "mvn dependency:copy failed (see above)"
  fi
  local tmp="$CACHE_DIR/unpack.$$"
  rm -rf "$tmp" && mkdir -p "$tmp"
  tar xzf "$dl/keycloak-quarkus-dist-$VERSION.tar.gz" -C "$tmp"
  rm -rf "$HOME_DIR"
  mv "$tmp/keycloak-$VERSION" "$HOME_DIR"
  rm -rf "$tmp" "$dl"
  # Quarkus' build step once, here, rather than at every start (minutes on a busy machine)
  local java_home
  java_home="$(find_java_home)" || die "Keycloak needs Java 21 or later: none found (set JAVA_HOME)"
  log "building it for an in-memory database ..."
  if ! JAVA_HOME="$java_home" "$HOME_DIR/bin/kc.sh" build $BUILD_OPTIONS >"$CACHE_DIR/build.log" 2>&1; then
    tail -n 40 "$CACHE_DIR/build.log" >&2
    die "kc.sh build failed (log: $CACHE_DIR/build.log)"
  fi
  echo "$VERSION $BUILD_OPTIONS" >"$STAMP"
  log "fetched in $((SECONDS - t0)) s"
  exec 9>&-
}

# ---------------------------------------------------------------- java

java_major() {  # java_major JAVA -> the major version it reports, or nothing
  "$1" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1
}

find_java_home() {
  local candidate v
  for candidate in "${JAVA_HOME:-}" "$(dirname "$(dirname "$(readlink -f "$(command -v java 2>/dev/null || echo /nonexistent)")")")" \
      $(ls -d /usr/lib/jvm/*/ 2>/dev/null | sort -rV); do
    candidate="${candidate%/}"
    [ -n "$candidate" ] && [ -x "$candidate/bin/java" ] || continue
    v="$(java_major "$candidate/bin/java")"
    if [ -n "$v" ] && [ "$v" -ge 21 ]; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

# ---------------------------------------------------------------- helpers

running_pid() { pid_from_file "--http-port=$PORT"; }

ready() {  # the management interface's readiness answers 200
  local response
  response="$( (exec 3<>"/dev/tcp/127.0.0.1/$MPORT" && printf 'GET /health/ready HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3 && head -1 <&3) 2>/dev/null || true)"
  [[ "$response" == *" 200"* ]]
}

# ---------------------------------------------------------------- start

cmd_start() {
  parse_opts "$@"
  is_fetched || cmd_fetch
  local java_home
  java_home="$(find_java_home)" || die "Keycloak needs Java 21 or later: none found (set JAVA_HOME)"
  local pid
  if pid="$(running_pid)"; then
    if ready; then
      log "already running (pid $pid, dir $DIR)"
      echo "http://127.0.0.1:$PORT"
      return 0
    fi
    die "a Keycloak is already running from $DIR (pid $pid) but is not ready; run: $0 stop --port $PORT --dir $DIR"
  fi
  rm -f "$PIDFILE"
  for p in "$PORT" "$MPORT"; do
    port_open "$p" && die "port 127.0.0.1:$p is already in use by another process"
  done
  mkdir -p "$DIR"
  echo "===== $(date -u +%FT%TZ) start (port $PORT, Java $(java_major "$java_home/bin/java")) =====" >>"$LOGFILE"
  local t0=$SECONDS
  JAVA_HOME="$java_home" PATH="$java_home/bin:$PATH" \
    JAVA_OPTS_KC_HEAP="-Xms64m -Xmx${KEYCLOAK_HEAP:-768m}" \
    KC_BOOTSTRAP_ADMIN_USERNAME="${KEYCLOAK_ADMIN:-admin}" \
    KC_BOOTSTRAP_ADMIN_PASSWORD="${KEYCLOAK_ADMIN_PASSWORD:-admin}" \
    setsid nohup "$HOME_DIR/bin/kc.sh" start --optimized --http-enabled=true --hostname-strict=false \
      --http-host=127.0.0.1 --http-port="$PORT" --http-management-port="$MPORT" \
      --log-level=WARN,org.keycloak.services:INFO \
      </dev/null >>"$LOGFILE" 2>&1 &
  pid=$!
  echo "$pid" >"$PIDFILE"
  local timeout="${KEYCLOAK_START_TIMEOUT:-600}"
  while ! ready; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PIDFILE"
      log "Keycloak exited during startup; last lines of $LOGFILE:"
      tail -n 40 "$LOGFILE" >&2
      exit 1
    fi
    if [ $((SECONDS - t0)) -ge "$timeout" ]; then
      log "not ready after ${timeout}s (pid $pid); last lines of $LOGFILE:"
      tail -n 40 "$LOGFILE" >&2
      stop_pid "$pid" "${KEYCLOAK_STOP_TIMEOUT:-30}" || true
      exit 1
    fi
    sleep 0.5
  done
  log "ready in $((SECONDS - t0)) s (pid $pid, log $LOGFILE)"
  echo "http://127.0.0.1:$PORT"
}

cmd_stop() {
  parse_opts "$@"
  local pid
  if ! pid="$(running_pid)"; then
    rm -f "$PIDFILE"
    log "not running (dir $DIR)"
    return 0
  fi
  local t0=$SECONDS
  stop_pid "$pid" "${KEYCLOAK_STOP_TIMEOUT:-30}"
  log "stopped pid $pid in $((SECONDS - t0)) s"
}

cmd_status() {
  parse_opts "$@"
  local pid
  if pid="$(running_pid)"; then
    if ready; then echo "running pid=$pid url=http://127.0.0.1:$PORT dir=$DIR"
    else echo "starting-or-unresponsive pid=$pid url=http://127.0.0.1:$PORT dir=$DIR"
    fi
    return 0
  fi
  echo "stopped dir=$DIR"
  return 3
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  fetch) cmd_fetch ;;
  start) cmd_start "$@" ;;
  stop) cmd_stop "$@" ;;
  status) cmd_status "$@" ;;
  java) find_java_home || die "no Java 21 or later found (set JAVA_HOME)" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
