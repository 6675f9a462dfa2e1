// Splits a project's test files into the two lanes its runner starts side by side
// (scripts/test-e2e.sh, docs/testing.md "The e2e lanes" and "The integration lanes"):
//   concurrent  files with a line starting `// <project>-lane: concurrent` (`// e2e-lane:
//               concurrent`, `// integration-lane: concurrent`); they use only resources of
//               their own (port 0, address blocks of their own, their own netns prefix, temp
//               folders, container names from their own state), so they may run beside any
//               other file of the project, two at a time;
//   alone       files with a line starting `// <project>-lane: alone`: they measure something a
//               neighbour's CPU changes, so scripts/test-all.sh runs them after the lanes, with
//               nothing beside them;
//   serial      every other file of the project, one at a time (the `fulcrum lab` with its fixed
//               address pools, fixed addresses and ports, address blocks shared with another
//               file, anything global).
// Usage: node scripts/e2e-lanes.mjs [e2e|integration] serial|concurrent|alone  -> one path per line,
// relative to the repository, sorted; the project defaults to e2e. Unmarked is the safe default:
// a new file runs serially until its author checks it against the rules and adds the marker.
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
/** The projects that run in lanes; the others (unit, security) run one file at a time. */
export const PROJECTS = ['e2e', 'integration'];
export const markerOf = (project) => new RegExp(`^\\/\\/ ${project}-lane: concurrent\\b`, 'm');
export const MARKER = markerOf('e2e');
export const aloneMarkerOf = (project) => new RegExp(`^\\/\\/ ${project}-lane: alone\\b`, 'm');

function walk(dir) {
  const out = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...walk(p));
    else if (e.name.endsWith('.test.ts')) out.push(relative(root, p).split('\\').join('/'));
  }
  return out;
}

export function lanes(project) {
  if (!PROJECTS.includes(project)) throw new Error(`no lanes for project ${project}`);
  const marker = markerOf(project);
  const files = walk(join(root, 'test', project)).sort();
  const text = (f) => readFileSync(join(root, f), 'utf8');
  const concurrent = files.filter((f) => marker.test(text(f)));
  const alone = files.filter((f) => !concurrent.includes(f) && aloneMarkerOf(project).test(text(f)));
  return { concurrent, alone, serial: files.filter((f) => !concurrent.includes(f) && !alone.includes(f)) };
}

export const e2eLanes = () => lanes('e2e');

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const args = process.argv.slice(2);
  const [project, lane] = args.length === 1 ? ['e2e', args[0]] : args;
  if (args.length < 1 || args.length > 2 || !PROJECTS.includes(project) || !['serial', 'concurrent', 'alone'].includes(lane)) {
    console.error(`usage: node scripts/e2e-lanes.mjs [${PROJECTS.join('|')}] serial|concurrent|alone`);
    process.exit(2);
  }
  for (const f of lanes(project)[lane]) console.log(f);
}
