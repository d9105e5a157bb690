# Process helpers the service scripts share (scripts/kafka.sh, scripts/keycloak.sh): sourced,
# after the script has defined log() and PIDFILE.

# pid_from_file MATCH -> the pid in $PIDFILE if that process is alive and its command line
# holds MATCH (a guard against pid reuse)
pid_from_file() {
  [ -f "$PIDFILE" ] || return 1
  local pid
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  if [ -r "/proc/$pid/cmdline" ]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$1" || return 1
  fi
  echo "$pid"
}

port_open() {  # port_open PORT -> 0 if something accepts TCP on 127.0.0.1:PORT
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# stop_pid PID TIMEOUT: SIGTERM, SIGKILL after TIMEOUT seconds, wait until it is gone, drop $PIDFILE
stop_pid() {
  local pid="$1" timeout="${2:-30}" waited=0
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$waited" -ge $((timeout * 10)) ]; then
      log "still running after ${timeout}s, sending SIGKILL to $pid"
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  rm -f "$PIDFILE"
}
