#!/usr/bin/env bash
# The one test command (README, .ci/run): installs what the tests need, type-checks, lints,
# then runs the unit, integration and security projects in turn, then the e2e project in its two
# lanes side by side (scripts/test-e2e.sh, docs/testing.md), and prints one summary line.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -d node_modules ] || npm ci --no-audit --no-fund
bash scripts/install-system-deps.sh
bash scripts/start-dockerd.sh
if [ -f scripts/build-mysql-image.sh ]; then
  bash scripts/build-mysql-image.sh
  # The upgrade target of test/e2e/databases/upgrade.test.ts (MariaDB 11.8 from Debian trixie).
  bash scripts/build-mysql-image.sh --suite trixie
fi

npm run --silent build
npx eslint .

results="$(mktemp -d)"
status=0
for project in unit integration security; do
  echo "== vitest project: $project"
  npx vitest run --project "$project" --reporter=default --reporter=json --outputFile.json="$results/$project.json" || status=1
done
echo "== vitest project: e2e (serial and concurrent lanes side by side)"
bash scripts/test-e2e.sh "$results" || status=1

node -e '
  const fs = require("fs");
  let passed = 0, failed = 0, skipped = 0;
  for (const p of ["unit", "integration", "security", "e2e-serial", "e2e-concurrent"]) {
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
