#!/usr/bin/env bash
# The e2e project in two lanes side by side (docs/testing.md, "The e2e lanes"):
#   serial      files without the marker, one at a time (--no-file-parallelism);
#   concurrent  files with a line `// e2e-lane: concurrent`, FULCRUM_E2E_WORKERS at a time (2).
# Usage: scripts/test-e2e.sh [results-dir]   writes e2e-serial.json and e2e-concurrent.json there.
# Exits non-zero when either lane fails; scripts/test-all.sh also counts skipped tests as failed.
set -euo pipefail
cd "$(dirname "$0")/.."

results="${1:-$(mktemp -d)}"
mkdir -p "$results"
export FULCRUM_E2E_WORKERS="${FULCRUM_E2E_WORKERS:-2}"
# Computed here, so that a failure of the split fails the command instead of emptying a lane.
serial="$(node scripts/e2e-lanes.mjs serial)"
concurrent="$(node scripts/e2e-lanes.mjs concurrent)"

# One lane: its files only (paths as filters), its own JSON report, every output line prefixed
# with the lane so that the two interleaved logs stay readable.
lane() {
  local name="$1" files="$2"; shift 2
  # No file means no filter, and vitest would run every e2e file: a lane with no files is empty.
  if [ -z "$files" ]; then
    echo '{"numPassedTests":0,"numFailedTests":0,"numPendingTests":0,"numTodoTests":0}' > "$results/e2e-$name.json"
    return 0
  fi
  mapfile -t list <<< "$files"
  npx vitest run --project e2e "$@" --reporter=default --reporter=json --outputFile.json="$results/e2e-$name.json" "${list[@]}" 2>&1 \
    | sed -u "s/^/[e2e $name] /"
}

lane serial "$serial" --no-file-parallelism &
serial_pid=$!
lane concurrent "$concurrent" --maxWorkers="$FULCRUM_E2E_WORKERS" &
concurrent_pid=$!
status=0
wait "$serial_pid" || status=1
wait "$concurrent_pid" || status=1
exit $status
