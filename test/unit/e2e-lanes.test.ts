import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../helpers/lab.js';

// The split of the e2e project into the serial and the concurrent lane (docs/testing.md): every
// e2e file runs in exactly one lane, both lanes count in the summary, and a file marked
// concurrent keeps away from what only one file may use at a time.
const lane = (name: 'serial' | 'concurrent') =>
  execFileSync(process.execPath, [path.join(repoRoot, 'scripts', 'e2e-lanes.mjs'), name], { encoding: 'utf8' }).split('\n').filter(Boolean);

function e2eFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return e2eFiles(p);
    return e.name.endsWith('.test.ts') ? [path.relative(repoRoot, p).split(path.sep).join('/')] : [];
  });
}

const serial = lane('serial');
const concurrent = lane('concurrent');
const source = (f: string) => readFileSync(path.join(repoRoot, f), 'utf8');

/** helpers/hosts.ts's subnet for a prefix given no explicit one. */
function defaultSubnet(prefix: string): number {
  let h = 7;
  for (const c of prefix) h = (h * 31 + c.charCodeAt(0)) % 251;
  return h + 1;
}

describe('e2e lanes', () => {
  it('puts every e2e file in exactly one lane, and neither lane is empty', () => {
    expect(serial.length).toBeGreaterThan(0);
    expect(concurrent.length).toBeGreaterThan(0);
    expect(serial.filter((f) => concurrent.includes(f))).toEqual([]);
    expect([...serial, ...concurrent].sort()).toEqual(e2eFiles(path.join(repoRoot, 'test', 'e2e')).sort());
  });

  it('runs both lanes and counts both reports in the one test command', () => {
    const e2e = readFileSync(path.join(repoRoot, 'scripts', 'test-e2e.sh'), 'utf8');
    expect(e2e).toMatch(/^lane serial "\$serial" --no-file-parallelism &$/m);
    expect(e2e).toMatch(/^lane concurrent "\$concurrent" --maxWorkers=/m);
    const all = readFileSync(path.join(repoRoot, 'scripts', 'test-all.sh'), 'utf8');
    expect(all).toContain('bash scripts/test-e2e.sh "$results" || status=1');
    expect(all).toContain('"e2e-serial", "e2e-concurrent"');
  });

  it('keeps the fulcrum lab (fixed address pools) and whole-range random address blocks out of the concurrent lane', () => {
    const lab = /\bstartLab\(|runFulcrum\(\[\s*'lab'/;
    expect(concurrent.filter((f) => lab.test(source(f)))).toEqual([]);
    // A block drawn from all of 100-249 meets another running file's 1 time in 150: ownOctet().
    expect(concurrent.filter((f) => /Math\.random\(\) \* 150/.test(source(f)))).toEqual([]);
  });

  it('gives each concurrent file that builds hosts its own netns prefix and subnet', () => {
    const nets = concurrent.filter((f) => source(f).includes('createHosts(')).map((f) => {
      const s = source(f);
      const prefix = /const PREFIX = '([a-z0-9]+)'/.exec(s)?.[1];
      expect(prefix, `${f} names its prefix in const PREFIX`).toBeDefined();
      const subnet = Number(/const SUBNET = (\d+)/.exec(s)?.[1] ?? defaultSubnet(prefix!));
      return { f, prefix, subnet };
    });
    expect(nets.length).toBeGreaterThan(0);
    expect(new Set(nets.map((n) => n.prefix)).size).toBe(nets.length);
    expect(new Set(nets.map((n) => n.subnet)).size).toBe(nets.length);
  });
});
