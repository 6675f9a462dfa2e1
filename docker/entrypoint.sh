#!/bin/sh
# The container image's entrypoint (scripts/build-fulcrum-image.sh, docker/Dockerfile): runs
# `fulcrum <command> ...` with the image's node, in place of this shell (exec: the process the
# container's signals reach is node). The data plane takes V8 flags on its command line
# (lib/node-flags.ts, DATAPLANE_NODE_FLAGS: V8 reads them only at start, and the data plane
# passes them on to its workers), as its systemd unit does; the other commands run without.
set -eu
if [ "${1:-}" = dataplane ]; then
  exec node --max-semi-space-size=16 /opt/fulcrum/bin/fulcrum.js "$@"
fi
exec node /opt/fulcrum/bin/fulcrum.js "$@"
