#!/usr/bin/env bash
# Run a real single-node Apache Kafka 4.x broker (KRaft, combined
# broker+controller) on 127.0.0.1 without Docker, for tests and CI.
#
#   scripts/kafka.sh fetch                         # download jars (idempotent)
#   scripts/kafka.sh start  [--port 9092] [--dir DIR]
#   scripts/kafka.sh stop   [--port 9092] [--dir DIR]
#   scripts/kafka.sh status [--port 9092] [--dir DIR]
#
# Needs Java 17+ (`java` on PATH) and Maven (`mvn`) for the first fetch.
# Jars come from Maven Central through scripts/kafka/pom.xml into
# .cache/kafka/libs. The controller listens on PORT+1. DIR defaults to
# .cache/kafka/run-PORT and holds server.properties, the data (DIR/data),
# DIR/kafka.log and DIR/kafka.pid; `stop` then `start` with the same DIR keeps
# the data. `start` prints the bootstrap address (127.0.0.1:PORT) on stdout.
#
# Environment (all optional):
#   KAFKA_HEAP=512m            max heap (-Xmx)
#   KAFKA_START_TIMEOUT=90     seconds to wait for the broker to be ready
#   KAFKA_STOP_TIMEOUT=30      seconds to wait after SIGTERM before SIGKILL
#   KAFKA_LOG_LEVEL=WARN       root log level written to DIR/kafka.log
#   KAFKA_EXTRA_JVM_OPTS=      more JVM options
#   KAFKA_EXTRA_PROPS=         more server.properties lines (newline separated)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
POM="$SCRIPT_DIR/kafka/pom.xml"
CACHE_DIR="$REPO_ROOT/.cache/kafka"
LIBS_DIR="$CACHE_DIR/libs"
STAMP="$LIBS_DIR/.fetched"

PORT=9092
DIR=""

log() { echo "kafka.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=lib/process.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/process.sh"

python_bin() {
  if command -v python3 >/dev/null 2>&1; then echo python3
  elif command -v python >/dev/null 2>&1; then echo python
  else echo ""
  fi
}

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
  CPORT=$((PORT + 1))
  [ -n "$DIR" ] || DIR="$CACHE_DIR/run-$PORT"
  DIR="$(realpath -m "$DIR")"
  PROPS="$DIR/server.properties"
  LOG4J="$DIR/log4j2.xml"
  PIDFILE="$DIR/kafka.pid"
  LOGFILE="$DIR/kafka.log"
}

usage() {
  sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

# ---------------------------------------------------------------- fetch

pom_hash() { sha256sum "$POM" | cut -d' ' -f1; }

is_fetched() {
  [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(pom_hash)" ] \
    && compgen -G "$LIBS_DIR/kafka_2.13-*.jar" >/dev/null
}

cmd_fetch() {
  mkdir -p "$CACHE_DIR"
  # One fetch at a time (parallel CI jobs on one machine share the cache).
  exec 9>"$CACHE_DIR/.fetch.lock"
  flock 9
  if is_fetched; then
    log "jars already in $LIBS_DIR (delete $STAMP to refetch)"
    exec 9>&-
    return 0
  fi
  command -v mvn >/dev/null 2>&1 || die "mvn not found on PATH (needed to fetch Kafka jars)"
  local tmp="$CACHE_DIR/libs.tmp.$$"
  rm -rf "$tmp"
  log "fetching Kafka jars from Maven Central into $LIBS_DIR ..."
  local t0=$SECONDS
  if ! mvn -q -B -f "$POM" dependency:copy-dependencies -Dkafka.libs.dir="$tmp" \
      >"$CACHE_DIR/fetch.log" 2>&1; then
    cat "$CACHE_DIR/fetch.log" >&2
    rm -rf "$tmp"
    die "mvn dependency:copy-dependencies failed (see above)"
  fi
  rm -rf "$LIBS_DIR"
  mv "$tmp" "$LIBS_DIR"
  pom_hash >"$STAMP"
  local jars=("$LIBS_DIR"/*.jar)
  log "fetched ${#jars[@]} jars in $((SECONDS - t0)) s"
  exec 9>&-
}

# ---------------------------------------------------------------- helpers

# pid from DIR/kafka.pid if that process is alive and is our broker (kafka.Kafka with our properties file)
running_pid() { pid_from_file "kafka.Kafka $PROPS"; }

# Ask the broker for metadata over the Kafka wire protocol (stdlib only):
# ApiVersions v0, then Metadata (v1..v8) with no topics; ready when it lists
# at least one broker.
probe_ready() {
  local py
  py="$(python_bin)"
  if [ -z "$py" ]; then
    grep -q "Kafka Server started" "$LOGFILE" 2>/dev/null
    return
  fi
  "$py" - "$PORT" <<'PY'
import socket, struct, sys
port = int(sys.argv[1])

def call(sock, api_key, version, corr, body=b""):
    client = b"kafka.sh"
    hdr = struct.pack(">hhih", api_key, version, corr, len(client)) + client
    msg = hdr + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    def recvn(n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("connection closed")
            buf += chunk
        return buf
    (size,) = struct.unpack(">i", recvn(4))
    data = recvn(size)
    (rcorr,) = struct.unpack(">i", data[:4])
    if rcorr != corr:
        raise ValueError("correlation id mismatch")
    return data[4:]

try:
    s = socket.create_connection(("127.0.0.1", port), timeout=3)
    s.settimeout(3)
    r = call(s, 18, 0, 1)  # ApiVersions v0
    (err, n) = struct.unpack(">hi", r[:6])
    if err != 0:
        sys.exit(1)
    meta = None
    for i in range(n):
        k, lo, hi = struct.unpack(">hhh", r[6 + 6 * i: 12 + 6 * i])
        if k == 3:
            meta = (lo, hi)
    if meta is None:
        sys.exit(1)
    v = min(meta[1], 8)
    if v < max(meta[0], 1):
        sys.exit(0)  # no non-flexible Metadata version; ApiVersions answered
    body = struct.pack(">i", 0)  # topics: empty array (no topics)
    if v >= 4:
        body += b"\x00"  # allow_auto_topic_creation
    if v >= 8:
        body += b"\x00\x00"  # include cluster/topic authorized operations
    r = call(s, 3, v, 2, body)
    off = 4 if v >= 3 else 0  # throttle_time_ms
    (nbrokers,) = struct.unpack(">i", r[off:off + 4])
    sys.exit(0 if nbrokers >= 1 else 1)
except Exception:
    sys.exit(1)
PY
}

check_java() {
  command -v java >/dev/null 2>&1 || die "java not found on PATH (Java 17+ needed)"
  local v
  v="$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)"
  if [ -z "$v" ] || [ "$v" -lt 17 ]; then
    die "Java 17+ needed, found: $(java -version 2>&1 | head -1)"
  fi
}

write_config() {
  cat >"$PROPS" <<EOF
# generated by scripts/kafka.sh; rewritten on every start
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$CPORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DIR/data
# partitions of a topic created by auto-creation (chatgql creates its own with
# CHATGQL_KAFKA_TOPIC_PARTITIONS); fixed for the topic's life: adding partitions remaps keys
num.partitions=8
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
${KAFKA_EXTRA_PROPS:-}
EOF
  # console-only log4j2 config; stdout goes to DIR/kafka.log
  cat >"$LOG4J" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <Console name="STDOUT" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="${KAFKA_LOG_LEVEL:-WARN}">
      <AppenderRef ref="STDOUT"/>
    </Root>
    <!-- keep the startup/shutdown lines ("Kafka Server started") -->
    <Logger name="kafka.server.KafkaRaftServer" level="INFO"/>
  </Loggers>
</Configuration>
EOF
}

# ---------------------------------------------------------------- start

cmd_start() {
  parse_opts "$@"
  check_java
  is_fetched || cmd_fetch

  local pid
  if pid="$(running_pid)"; then
    if probe_ready; then
      log "already running (pid $pid, dir $DIR)"
      echo "127.0.0.1:$PORT"
      return 0
    fi
    die "a broker is already running from $DIR (pid $pid) but does not answer; run: $0 stop --port $PORT --dir $DIR"
  fi
  rm -f "$PIDFILE"
  for p in "$PORT" "$CPORT"; do
    port_open "$p" && die "port 127.0.0.1:$p is already in use by another process"
  done

  mkdir -p "$DIR/data" "$DIR/logs"
  write_config
  local cp="$LIBS_DIR/*"

  local cid
  if [ -s "$DIR/cluster.id" ]; then
    cid="$(cat "$DIR/cluster.id")"
  else
    cid="$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)"
    [ -n "$cid" ] || die "StorageTool random-uuid failed"
    echo "$cid" >"$DIR/cluster.id"
  fi
  {
    echo "===== $(date -u +%FT%TZ) format + start (port $PORT) ====="
  } >>"$LOGFILE"
  if ! java -cp "$cp" -Dlog4j2.configurationFile="$LOG4J" \
      kafka.tools.StorageTool format --standalone -t "$cid" -c "$PROPS" \
      --ignore-formatted >>"$LOGFILE" 2>&1; then
    tail -n 40 "$LOGFILE" >&2
    die "storage format failed (log: $LOGFILE)"
  fi

  local t0=$SECONDS
  # shellcheck disable=SC2086
  nohup java -Xmx"${KAFKA_HEAP:-512m}" -Xms64m \
    -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
    -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$LOG4J" -Dkafka.logs.dir="$DIR/logs" \
    ${KAFKA_EXTRA_JVM_OPTS:-} \
    -cp "$cp" kafka.Kafka "$PROPS" \
    </dev/null >>"$LOGFILE" 2>&1 &
  pid=$!
  echo "$pid" >"$PIDFILE"

  local timeout="${KAFKA_START_TIMEOUT:-90}"
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PIDFILE"
      log "broker process $pid exited during startup; last lines of $LOGFILE:"
      tail -n 40 "$LOGFILE" >&2
      exit 1
    fi
    if port_open "$PORT" && probe_ready; then
      break
    fi
    if [ $((SECONDS - t0)) -ge "$timeout" ]; then
      log "broker not ready after ${timeout}s (pid $pid); last lines of $LOGFILE:"
      tail -n 40 "$LOGFILE" >&2
      log "stopping it"
      stop_pid "$pid" "${KAFKA_STOP_TIMEOUT:-30}" || true
      exit 1
    fi
    sleep 0.5
  done
  log "ready in $((SECONDS - t0)) s (pid $pid, dir $DIR, log $LOGFILE)"
  echo "127.0.0.1:$PORT"
}

# ---------------------------------------------------------------- stop

cmd_stop() {
  parse_opts "$@"
  local pid
  if ! pid="$(running_pid)"; then
    rm -f "$PIDFILE"
    log "not running (dir $DIR)"
    return 0
  fi
  local t0=$SECONDS
  stop_pid "$pid" "${KAFKA_STOP_TIMEOUT:-30}"
  log "stopped pid $pid in $((SECONDS - t0)) s (data kept in $DIR/data)"
}

# ---------------------------------------------------------------- status

cmd_status() {
  parse_opts "$@"
  local pid
  if pid="$(running_pid)"; then
    if probe_ready; then
      echo "running pid=$pid bootstrap=127.0.0.1:$PORT dir=$DIR"
    else
      echo "starting-or-unresponsive pid=$pid bootstrap=127.0.0.1:$PORT dir=$DIR"
    fi
    return 0
  fi
  echo "stopped dir=$DIR"
  return 3
}

# ---------------------------------------------------------------- main

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  fetch) cmd_fetch ;;
  start) cmd_start "$@" ;;
  stop) cmd_stop "$@" ;;
  status) cmd_status "$@" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
