#!/usr/bin/env bash
# A project in two lanes side by side (docs/testing.md, "The e2e lanes", "The integration lanes"):
#   serial      files without the marker, one at a time (--no-file-parallelism);
#   concurrent  files with a line `// <project>-lane: concurrent`, FULCRUM_<PROJECT>_WORKERS at a
#               time (FULCRUM_E2E_WORKERS, FULCRUM_INTEGRATION_WORKERS; 2).
# Usage: scripts/test-e2e.sh [results-dir] [e2e|integration]   the project defaults to e2e;
# writes <project>-serial.json and <project>-concurrent.json there.
# Exits non-zero when either lane fails; scripts/test-all.sh also counts skipped tests as failed.
set -euo pipefail
cd "$(dirname "$0")/.."

results="${1:-$(mktemp -d)}"
project="${2:-e2e}"
mkdir -p "$results"
case "$project" in
  e2e) export FULCRUM_E2E_WORKERS="${FULCRUM_E2E_WORKERS:-2}"; workers="$FULCRUM_E2E_WORKERS" ;;
  integration) workers="${FULCRUM_INTEGRATION_WORKERS:-2}" ;;
  *) echo "usage: scripts/test-e2e.sh [results-dir] [e2e|integration]" >&2; exit 2 ;;
esac
# Computed here, so that a failure of the split fails the command instead of emptying a lane.
serial="$(node scripts/e2e-lanes.mjs "$project" serial)"
concurrent="$(node scripts/e2e-lanes.mjs "$project" concurrent)"

# One lane: its files only (paths as filters), its own JSON report, every output line prefixed
# with the lane so that the two interleaved logs stay readable.
lane() {
  local name="$1" files="$2"; shift 2
  # No file means no filter, and vitest would run every file of the project: a lane with no
  # files is empty.
  if [ -z "$files" ]; then
    echo '{"numPassedTests":0,"numFailedTests":0,"numPendingTests":0,"numTodoTests":0}' > "$results/$project-$name.json"
    return 0
  fi
  mapfile -t list <<< "$files"
  npx vitest run --project "$project" "$@" --reporter=default --reporter=json --outputFile.json="$results/$project-$name.json" "${list[@]}" 2>&1 \
    | sed -u "s/^/[$project $name] /"
}

lane serial "$serial" --no-file-parallelism &
serial_pid=$!
lane concurrent "$concurrent" --maxWorkers="$workers" &
concurrent_pid=$!
status=0
wait "$serial_pid" || status=1
wait "$concurrent_pid" || status=1
exit $status
