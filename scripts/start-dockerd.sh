#!/usr/bin/env bash
# Makes a Docker daemon available on this machine, for the docker runtime and its tests.
#
# Does nothing when `docker info` already answers. Otherwise, as root:
#  1. with systemd running and a docker unit installed, `systemctl start docker`;
#  2. else starts dockerd in the background (detached, log in $LOG), trying configurations from
#     the most to the least capable until one answers `docker info` within the bounded wait:
#       default (overlay2 + iptables + docker0 bridge)
#       --iptables=false --bridge=none        (no netfilter: fine, our containers use host networking)
#       --storage-driver=vfs                  (no overlayfs, e.g. nested in an overlay root)
#       --storage-driver=vfs --iptables=false --bridge=none
# Prints the configuration that worked (also written to $STATE) and exits 0, or prints why not
# with the tail of the daemon log and exits 1.
#
# Env: DOCKERD_WAIT (seconds per attempt, default 30), DOCKERD_LOG, DOCKERD_EXTRA_ARGS (added to every
# attempt), DOCKERD_PIDFILE and DOCKERD_STATE (for a second daemon, with DOCKER_HOST and -H/--pidfile/
# --data-root/--exec-root in DOCKERD_EXTRA_ARGS).
set -euo pipefail

LOG="${DOCKERD_LOG:-/var/log/fulcrum/dockerd.log}"
STATE="${DOCKERD_STATE:-/run/fulcrum-dockerd.args}"
PIDFILE="${DOCKERD_PIDFILE:-/var/run/docker.pid}"
WAIT="${DOCKERD_WAIT:-30}"

log() { printf 'start-dockerd: %s\n' "$*" >&2; }

docker_ok() { docker info >/dev/null 2>&1; }

describe() {
  docker info --format 'dockerd {{.ServerVersion}}, storage {{.Driver}}, cgroup {{.CgroupDriver}} v{{.CgroupVersion}}, memory limit {{.MemoryLimit}}, cpu quota {{.CPUCfsQuota}}' 2>/dev/null \
    || docker info --format 'dockerd {{.ServerVersion}}, storage {{.Driver}}' 2>/dev/null || true
}

if docker_ok; then
  log "already running: $(describe)"
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
  log "dockerd is not installed: run scripts/install-system-deps.sh first"
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  log "docker is not answering and starting dockerd needs root"
  exit 1
fi

wait_ready() { # $1 = pid of the daemon we started (empty under systemd)
  local deadline=$((SECONDS + WAIT))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if docker_ok; then return 0; fi
    if [ -n "${1:-}" ] && ! kill -0 "$1" 2>/dev/null; then return 1; fi
    sleep 0.2
  done
  docker_ok
}

if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1 && systemctl cat docker.service >/dev/null 2>&1; then
  log "systemd present: systemctl start docker"
  if systemctl start docker && wait_ready ""; then
    log "running: $(describe)"
    exit 0
  fi
  log "systemctl start docker did not give a working daemon; starting dockerd directly"
  systemctl stop docker docker.socket >/dev/null 2>&1 || true
fi

# A dockerd left over from a crash may hold the pid file while its socket is dead.
if [ -f "$PIDFILE" ]; then
  old="$(cat "$PIDFILE" 2>/dev/null || true)"
  if [ -n "$old" ] && kill -0 "$old" 2>/dev/null && grep -qa dockerd "/proc/$old/cmdline" 2>/dev/null; then
    log "dockerd pid $old exists but does not answer; waiting for it"
    if wait_ready "$old"; then log "running: $(describe)"; exit 0; fi
    log "dockerd pid $old is unresponsive; stop it (kill $old) and rerun"
    exit 1
  fi
  rm -f "$PIDFILE"
fi

mkdir -p "$(dirname "$LOG")"
read -r -a extra <<<"${DOCKERD_EXTRA_ARGS:-}"
attempts=(
  ""
  "--iptables=false --bridge=none"
  "--storage-driver=vfs"
  "--storage-driver=vfs --iptables=false --bridge=none"
)
for args in "${attempts[@]}"; do
  read -r -a argv <<<"$args"
  log "starting dockerd ${args:-(defaults)}; log: $LOG"
  printf '\n==== %s dockerd %s\n' "$(date -u +%FT%TZ)" "$args" >>"$LOG"
  # --live-restore: database containers keep running while dockerd itself restarts.
  setsid dockerd --live-restore "${argv[@]}" "${extra[@]}" >>"$LOG" 2>&1 </dev/null &
  pid=$!
  if wait_ready "$pid"; then
    printf '%s\n' "$args" >"$STATE"
    log "running (pid $pid, args: ${args:-defaults}): $(describe)"
    exit 0
  fi
  log "dockerd ${args:-(defaults)} failed; last log lines:"
  tail -n 8 "$LOG" | sed 's/^/  | /' >&2
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
done

log "no dockerd configuration worked on this machine; see $LOG"
exit 1
