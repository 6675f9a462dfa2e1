// Splits the e2e test files into the two lanes scripts/test-all.sh runs side by side
// (docs/testing.md, "The e2e lanes"):
//   concurrent  files with a line starting `// e2e-lane: concurrent`; they use only resources of
//               their own (port 0, random or per-worker address blocks, their own netns prefix,
//               temp folders, container names from their own state), so they may run beside
//               any other e2e file, two at a time;
//   serial      every other e2e file, one at a time (the `fulcrum lab` with its fixed address
//               pools, fixed addresses and ports, anything global).
// Usage: node scripts/e2e-lanes.mjs serial|concurrent  -> one path per line, relative to the
// repository, sorted. Unmarked is the safe default: a new file runs serially until its author
// checks it against the rules and adds the marker.
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const MARKER = /^\/\/ e2e-lane: concurrent\b/m;

function walk(dir) {
  const out = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...walk(p));
    else if (e.name.endsWith('.test.ts')) out.push(relative(root, p).split('\\').join('/'));
  }
  return out;
}

export function e2eLanes() {
  const files = walk(join(root, 'test', 'e2e')).sort();
  const concurrent = files.filter((f) => MARKER.test(readFileSync(join(root, f), 'utf8')));
  return { concurrent, serial: files.filter((f) => !concurrent.includes(f)) };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const lane = process.argv[2];
  const lanes = e2eLanes();
  if (lane !== 'serial' && lane !== 'concurrent') {
    console.error('usage: node scripts/e2e-lanes.mjs serial|concurrent');
    process.exit(2);
  }
  for (const f of lanes[lane]) console.log(f);
}
