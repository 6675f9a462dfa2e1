#!/usr/bin/env bash
# Builds the lab's MySQL-compatible image `fulcrum/mariadb:10.11` (+ `fulcrum/mariadb:<x.y.z>`)
# without any container registry: debootstrap a minimal Debian bookworm rootfs from the Debian
# mirror apt already uses, install mariadb-server + mariadb-client into it with apt (security
# updates included, so the image runs the same version as the host packages), strip docs and
# caches, and `docker import` the tarball. See docs/docker.md.
#
# Fast paths: nothing to do when the image exists (unless --force); downloaded packages are
# cached under /var/cache/fulcrum (debootstrap debs, apt debs seeded from the host's apt cache),
# and the host's package lists are reused, so a rebuild needs no network.
#
# A second series comes from a newer Debian suite: `--suite trixie` builds `fulcrum/mariadb:11.8`
# the same way (the lab's upgrade target, docs/docker.md "Images").
#
# Usage: scripts/build-mysql-image.sh [--force] [--suite bookworm|trixie]
# Env: FULCRUM_MYSQL_IMAGE (default fulcrum/mariadb)
set -euo pipefail

REPO="${FULCRUM_MYSQL_IMAGE:-fulcrum/mariadb}"
SUITE=bookworm
CACHE=/var/cache/fulcrum
FORCE=0

log() { printf 'build-mysql-image: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --force) FORCE=1 ;;
    --suite) SUITE="${2:-}"; shift ;;
    --suite=*) SUITE="${1#--suite=}" ;;
    *) die "unknown argument $1 (usage: [--force] [--suite bookworm|trixie])" ;;
  esac
  shift
done
# The MariaDB series each Debian suite ships: the image's series tag and the version check below.
case "$SUITE" in
  bookworm) SERIES=10.11 ;;
  trixie) SERIES=11.8 ;;
  *) die "unknown suite $SUITE (bookworm or trixie)" ;;
esac

if ! docker info >/dev/null 2>&1; then
  die "docker is not answering: run scripts/start-dockerd.sh first"
fi
# An image from before mariadb-backup was part of it (physical base backups for forks,
# docs/agent.md §6) is rebuilt.
if [ "$FORCE" -eq 0 ] && docker image inspect "$REPO:$SERIES" >/dev/null 2>&1 \
  && docker run --rm --network none "$REPO:$SERIES" mariadb-backup --version >/dev/null 2>&1; then
  log "$REPO:$SERIES exists ($(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}}' "$REPO:$SERIES")); --force rebuilds"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || die "building the image needs root (debootstrap, chroot)"
command -v debootstrap >/dev/null 2>&1 || die "debootstrap missing: run scripts/install-system-deps.sh first"

# The mirrors apt uses here (deb822 .sources or classic .list), so that only reachable hosts are used.
uris="$({
  grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | sed 's/^URIs:[[:space:]]*//' | tr ' ' '\n'
  grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | sed -E 's/^deb +(\[[^]]*\] +)?//' | awk '{print $1}'
} || true)"
MIRROR="$(grep -E '/debian/?$' <<<"$uris" | head -n1 || true)"
SECURITY="$(grep -E '/debian-security/?$' <<<"$uris" | head -n1 || true)"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
SECURITY="${SECURITY:-http://deb.debian.org/debian-security}"

WORK="$(mktemp -d /var/tmp/fulcrum-mariadb-image.XXXXXX)"
ROOT="$WORK/rootfs"
cleanup() {
  for m in "$ROOT/proc" "$ROOT/var/cache/apt/archives"; do
    if mountpoint -q "$m" 2>/dev/null; then umount "$m" || umount -l "$m" || true; fi
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$CACHE/debootstrap" "$CACHE/apt-archives/partial"
start=$SECONDS
log "debootstrap $SUITE (minbase) from $MIRROR; package cache $CACHE/debootstrap"
if ! debootstrap --variant=minbase --cache-dir="$CACHE/debootstrap" "$SUITE" "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1; then
  tail -n 20 "$WORK/debootstrap.log" >&2
  die "debootstrap failed"
fi
log "base system ready after $((SECONDS - start)) s"

cat >"$ROOT/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
rm -f "$ROOT/etc/apt/sources.list"
# Services must not start inside the build chroot.
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
chmod 755 "$ROOT/usr/sbin/policy-rc.d"

# Same suite and mirrors as the host: its package lists are valid here and spare a download.
host_codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
have_lists=0
if [ "$host_codename" = "$SUITE" ] && compgen -G "/var/lib/apt/lists/*_dists_${SUITE}*_Packages*" >/dev/null; then
  cp /var/lib/apt/lists/*_dists_"${SUITE}"* "$ROOT/var/lib/apt/lists/" 2>/dev/null && have_lists=1
fi

mount -t proc proc "$ROOT/proc"
mount --bind "$CACHE/apt-archives" "$ROOT/var/cache/apt/archives"
in_root() { DEBIAN_FRONTEND=noninteractive LC_ALL=C chroot "$ROOT" "$@"; }
# mariadb-backup: physical base backups of the binlog archive, taken and prepared inside the
# container by the server's own version (docs/agent.md §6).
PKGS=(mariadb-server mariadb-client mariadb-backup)
APT=(apt-get -y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold --no-install-recommends)

if [ "$have_lists" -eq 0 ] || ! in_root apt-get -qq --print-uris install --no-install-recommends "${PKGS[@]}" >/dev/null 2>&1; then
  log "apt-get update inside the rootfs"
  in_root apt-get update -q >"$WORK/apt.log" 2>&1 || { tail -n 20 "$WORK/apt.log" >&2; die "apt-get update failed"; }
fi
# Seed our deb cache from the host's apt cache (same archive, same file names; apt checks hashes).
in_root apt-get -qq --print-uris install --no-install-recommends "${PKGS[@]}" | awk '{print $2}' | while read -r f; do
  if [ -f "/var/cache/apt/archives/$f" ] && [ ! -e "$CACHE/apt-archives/$f" ]; then cp "/var/cache/apt/archives/$f" "$CACHE/apt-archives/"; fi
done
log "installing ${PKGS[*]}"
if ! in_root "${APT[@]}" install "${PKGS[@]}" >>"$WORK/apt.log" 2>&1; then
  log "install failed; refreshing package lists and retrying"
  in_root apt-get update -q >>"$WORK/apt.log" 2>&1 || true
  in_root "${APT[@]}" install "${PKGS[@]}" >>"$WORK/apt.log" 2>&1 || { tail -n 20 "$WORK/apt.log" >&2; die "apt-get install failed"; }
fi

VERSION="$(in_root mariadbd --version | sed -nE 's/.*Ver ([0-9]+\.[0-9]+\.[0-9]+).*/\1/p')"
[ -n "$VERSION" ] || die "could not read the server version from the rootfs"
case "$VERSION" in "$SERIES".*) ;; *) die "expected MariaDB $SERIES.x, got $VERSION" ;; esac

umount "$ROOT/var/cache/apt/archives"
umount "$ROOT/proc"

# Strip what a server image never needs. The data dir is emptied: the agent bind-mounts its own
# and initialises it (the Debian postinst created a default one).
rm -f "$ROOT/usr/sbin/policy-rc.d"
rm -rf "$ROOT"/var/lib/mysql/* "$ROOT"/var/cache/apt/* "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/log/* \
  "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* "$ROOT"/usr/share/locale/* \
  "$ROOT"/tmp/* "$ROOT"/debootstrap "$ROOT"/var/cache/debconf/*-old "$ROOT"/var/lib/dpkg/*-old
mkdir -p "$ROOT/run/mysqld" "$ROOT/fulcrum"
log "rootfs $(du -sh "$ROOT" | cut -f1), MariaDB $VERSION; importing"

tar -C "$ROOT" --numeric-owner -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'WORKDIR /' \
  --change 'EXPOSE 3306/tcp' \
  --change 'CMD ["mariadbd"]' \
  --change "LABEL org.opencontainers.image.title=fulcrum-mariadb org.opencontainers.image.version=$VERSION org.opencontainers.image.base.name=debian:$SUITE fulcrum.image=mariadb" \
  -m "debootstrap $SUITE minbase + mariadb-server/mariadb-client $VERSION" \
  - "$REPO:$VERSION" >/dev/null
docker tag "$REPO:$VERSION" "$REPO:$SERIES"

# Smoke test: the image runs its server binary.
got="$(docker run --rm --network none "$REPO:$SERIES" mariadbd --version 2>/dev/null)" || die "smoke test failed: $got"
docker run --rm --network none "$REPO:$SERIES" mariadb-backup --version >/dev/null 2>&1 || die "smoke test failed: no mariadb-backup in the image"
log "built $REPO:$SERIES and $REPO:$VERSION in $((SECONDS - start)) s: $got"
