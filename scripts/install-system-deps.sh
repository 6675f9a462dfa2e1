#!/usr/bin/env bash
# Installs the Debian packages the Fulcrum test suite runs for real (MariaDB servers and
# mariadb-backup for the forks' physical bases, Docker,
# the proxies we compare against, the load generator, debootstrap for the lab image, keepalived
# for data planes in pairs, iptables for the multi-host tests' bridges, dnsmasq and dig for the
# UDP DNS test, nginx's stream module for the UDP bench, the headless browser the console's
# browser test drives, and PostgreSQL for the control plane's PostgreSQL store tests).
#
# Idempotent and fast when everything is present (one dpkg-query, no network). Meant for a fresh
# Debian 12 machine or CI runner as root without a TTY, where only the Debian mirror and the npm
# registry are reachable. Package maintainer scripts must not leave system services (mariadb on
# 3306, nginx on 80, haproxy) running: tests start their own servers on their own addresses, so a
# temporary policy-rc.d forbids service starts during the install, and anything already started
# is stopped afterwards.
set -euo pipefail

PKGS=(mariadb-server mariadb-client mariadb-backup docker.io haproxy nginx wrk debootstrap openssl iproute2 keepalived iptables
  dnsmasq-base bind9-dnsutils libnginx-mod-stream chromium)
SERVICES=(mariadb nginx haproxy keepalived)

log() { printf 'install-system-deps: %s\n' "$*" >&2; }

# systemd-analyze checks the unit files of docs/install.md (test/integration/cli/systemd-units.test.ts).
PKGS+=(systemd)

# PostgreSQL 15 for the control plane's PostgreSQL store: the store tests start their own private
# cluster with initdb/pg_ctl (test/helpers/postgres.ts), never the distribution's service.
PKGS+=(postgresql)
SERVICES+=(postgresql)

# A C compiler and libc headers for the data plane's native udp datagram path
# (scripts/build-native.mjs, run by npm ci and again by `npm run build` after this script).
PKGS+=(gcc libc6-dev)

# curl for the control-plane VIP's health check (scripts/keepalived/fulcrum-api-check.sh,
# test/integration/cli/control-plane-vip.test.ts).
PKGS+=(curl)

# OpenStack Swift with its s3api middleware: the S3-compatible object store the backup-store tests
# start on loopback (test/helpers/object-store.ts); never the distribution's services.
PKGS+=(swift-proxy swift-account swift-container swift-object)

# The group every database server runs in (docs/security/mysql.md): each database gets its own
# uid in it, never root; the agent creates the group itself when this script did not run.
ensure_node_group() {
  getent group fulcrum-db >/dev/null 2>&1 && return 0
  [ "$(id -u)" -eq 0 ] || return 0
  groupadd --system fulcrum-db && log "created group fulcrum-db"
}

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

# Stops the distribution's own daemons if an init system started them. `service` works both
# with systemd and with plain sysvinit scripts (containers, this lab); status is cheap.
stop_system_services() {
  command -v service >/dev/null 2>&1 || return 0
  for s in "${SERVICES[@]}"; do
    [ -e "/etc/init.d/$s" ] || [ -d /run/systemd/system ] || continue
    if service "$s" status >/dev/null 2>&1; then
      log "stopping system service $s (tests run their own servers)"
      service "$s" stop >/dev/null 2>&1 || log "warning: could not stop $s"
    fi
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
      systemctl disable "$s" >/dev/null 2>&1 || true
    fi
  done
}

if [ "${#missing[@]}" -eq 0 ]; then
  ensure_node_group
  stop_system_services
  log "all present: ${PKGS[*]}"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  log "missing packages (${missing[*]}) and not root: run this script as root"
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# Recommends stay on: docker.io recommends apparmor, without which dockerd cannot load its
# default profile on kernels that enable AppArmor (Debian's do).
APT_OPTS=(-y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)

# Forbid service starts while installing (invoke-rc.d and deb-systemd-invoke both honour it).
# An existing policy is left in place and restored; ours is removed on every exit path.
POLICY=/usr/sbin/policy-rc.d
policy_backup=""
if [ -e "$POLICY" ]; then
  policy_backup="$(mktemp)"
  cp -p "$POLICY" "$policy_backup"
fi
restore_policy() {
  if [ -n "$policy_backup" ]; then
    cp -p "$policy_backup" "$POLICY"
    rm -f "$policy_backup"
  else
    rm -f "$POLICY"
  fi
}
trap restore_policy EXIT
printf '#!/bin/sh\nexit 101\n' >"$POLICY"
chmod 755 "$POLICY"

# apt-get update only when the package lists are absent or stale enough that the install fails.
have_lists() { compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; }
updated=0
if ! have_lists; then
  log "apt-get update (no package lists yet)"
  apt-get update -q
  updated=1
fi

log "installing: ${missing[*]}"
if ! apt-get install "${APT_OPTS[@]}" "${missing[@]}"; then
  if [ "$updated" -eq 1 ]; then
    log "apt-get install failed"
    exit 1
  fi
  log "install failed; refreshing package lists once and retrying"
  apt-get update -q
  apt-get install "${APT_OPTS[@]}" "${missing[@]}"
fi

ensure_node_group
stop_system_services
log "done: ${PKGS[*]}"
