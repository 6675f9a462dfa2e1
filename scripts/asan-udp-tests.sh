#!/usr/bin/env bash
# Runs the udp tests against the native udp relay built with AddressSanitizer and
# UndefinedBehaviorSanitizer (docs/dataplane.md "Running the addon under ASan and UBSan"), by hand:
# CI does not run it. Any report aborts the test process, so a finding shows as a failed or
# crashed test file with the sanitizer's report on stderr. The plain addon is built again at the end.
#
#   bash scripts/asan-udp-tests.sh [more vitest file paths...]
set -euo pipefail
cd "$(dirname "$0")/.."

libasan=$(gcc -print-file-name=libasan.so)
[ -e "$libasan" ] || { echo "no libasan.so from gcc (-print-file-name gave $libasan)" >&2; exit 1; }

# The tests' own helper programs (dnsmasq, dig) must not get the sanitizer runtime: it is made for
# an instrumented program and hangs dnsmasq. They are reached through PATH, so wrappers earlier on
# PATH drop LD_PRELOAD before running the real ones.
wrappers=$(mktemp -d)
trap 'rm -rf "$wrappers"; npm run --silent build:native' EXIT
for tool in dnsmasq dig; do
  real=$(command -v "$tool" || true)
  [ -n "$real" ] || continue
  printf '#!/bin/sh\nunset LD_PRELOAD\nexec %s "$@"\n' "$real" > "$wrappers/$tool"
  chmod +x "$wrappers/$tool"
done

FULCRUM_NATIVE_SANITIZE=1 npm run --silent build:native

# detect_leaks=0: Node itself leaks at exit; the addon's own leaks are not what this run looks for.
export LD_PRELOAD="$libasan" ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1" PATH="$wrappers:$PATH"
status=0
npx vitest run --project security test/security/udp-native-hostile.test.ts || status=1
npx vitest run --project integration \
  test/integration/dataplane/udp-native.test.ts test/integration/dataplane/udp.test.ts \
  test/integration/dataplane/udp-modes.test.ts test/integration/dataplane/udp-dns.test.ts \
  test/integration/dataplane/udp-workers.test.ts test/integration/api/udp-traffic.test.ts "$@" || status=1
exit $status
