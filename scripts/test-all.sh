#!/usr/bin/env bash
# The one test command (README, .ci/run): installs what the tests need, type-checks, lints,
# then runs the unit project, the integration project in its two lanes side by side, the security
# project, then the e2e project in its two lanes side by side (scripts/test-e2e.sh,
# docs/testing.md), and prints one summary line that counts every report.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -d node_modules ] || npm ci --no-audit --no-fund
# The Go clients of the e2e tests (test/clients/, test/helpers/go-clients.ts) build in the
# background from here on, while the packages install and the other projects run; the e2e tests
# wait for that build (or make it themselves if it failed), and it is cached in ~/.cache/fulcrum.
go_log="$(mktemp)"
# tsx, not node: the helper imports its neighbours by their .js names, which only a TypeScript
# loader maps to the .ts files (plain node failed here unnoticed, and linodego.test.ts built it).
npx tsx test/helpers/go-clients.ts > "$go_log" 2>&1 &
go_build=$!
bash scripts/install-system-deps.sh
bash scripts/start-dockerd.sh
# The MariaDB images build in the background (debootstrap mostly waits on the network and the
# disk) while the build, the lint and the unit project use the CPU; the integration project is the
# first to need them and waits for them below.
images_log="$(mktemp)"
(
  bash scripts/build-mysql-image.sh
  # The upgrade target of test/e2e/databases/upgrade.test.ts and test/e2e/db-host-rolling.test.ts
  # (MariaDB 11.8 from Debian trixie).
  bash scripts/build-mysql-image.sh --suite trixie
) > "$images_log" 2>&1 &
images=$!

npm run --silent build
npx eslint .

results="$(mktemp -d)"
status=0
# One file at a time (vitest's maxWorkers on 2 cores is 1).
serial_project() {
  echo "== vitest project: $1"
  npx vitest run --project "$1" --reporter=default --reporter=json --outputFile.json="$results/$1.json" || status=1
}
serial_project unit
images_status=0
wait "$images" || images_status=$?
cat "$images_log"
if [ "$images_status" -ne 0 ]; then
  echo "building the MariaDB images failed (exit $images_status)" >&2
  exit 1
fi
echo "== vitest project: integration (serial and concurrent lanes side by side)"
bash scripts/test-e2e.sh "$results" integration || status=1
# Files marked `// integration-lane: alone` measure something a neighbour's CPU changes: after the
# lanes, with nothing beside them (their report is counted with the others below).
alone="$(node scripts/e2e-lanes.mjs integration alone)"
if [ -n "$alone" ]; then
  echo "== vitest project: integration, the files that run alone"
  mapfile -t alone_files <<< "$alone"
  npx vitest run --project integration --reporter=default --reporter=json --outputFile.json="$results/integration-alone.json" "${alone_files[@]}" || status=1
fi
serial_project security
wait "$go_build" || true
sed 's/^/go clients: /' "$go_log"
echo "== vitest project: e2e (serial and concurrent lanes side by side)"
bash scripts/test-e2e.sh "$results" || status=1

node -e '
  const fs = require("fs");
  let passed = 0, failed = 0, skipped = 0;
  // Every report the run must write (a missing one is a failure), then any other report in the
  // folder, so that a lane or project added later is counted too.
  const expected = ["unit", "integration-serial", "integration-concurrent", "security", "e2e-serial", "e2e-concurrent"];
  const others = fs.readdirSync(process.argv[1]).filter((f) => f.endsWith(".json")).map((f) => f.slice(0, -5))
    .filter((p) => !expected.includes(p)).sort();
  for (const p of [...expected, ...others]) {
    const f = process.argv[1] + "/" + p + ".json";
    if (!fs.existsSync(f)) { failed++; console.log(`project ${p}: no results`); continue; }
    const r = JSON.parse(fs.readFileSync(f, "utf8"));
    passed += r.numPassedTests; failed += r.numFailedTests + (r.numFailedTestSuites || 0);
    skipped += r.numPendingTests + (r.numTodoTests || 0);
  }
  // A skipped test is a failing test in disguise: count it as one.
  console.log(`tests: ${passed} passed, ${failed + skipped} failed`);
  if (failed + skipped > 0) process.exitCode = 1;
' "$results" || status=1
exit $status
