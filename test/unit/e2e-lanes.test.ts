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

  it('has every file of either lane that builds its own database blocks hold them host-wide (claimOctet)', () => {
    // Serial files run beside the concurrent lane: a randomly drawn 127.78.<octet> met a lab's
    // (docs/testing.md), and that lab's client reached the other database's endpoint.
    const own = [...serial, ...concurrent].filter((f) => /127\.7[689]\.\$\{/.test(source(f)));
    expect(own.length).toBeGreaterThan(0);
    expect(own.filter((f) => !/\b(claimOctet|ownOctet)\(/.test(source(f)))).toEqual([]);
  });

  it('gives each concurrent file that builds hosts its own netns prefix and subnet', () => {
    const nets = concurrent.filter((f) => source(f).includes('createHosts(') || source(f).includes('startHostsFleet(')).map((f) => {
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

// The same split of the integration project (docs/testing.md, "The integration lanes"): one
// serial file runs beside two concurrent ones, so a concurrent file must use nothing another
// integration file uses.
describe('integration lanes', () => {
  const intLane = (name: 'serial' | 'concurrent' | 'alone') =>
    execFileSync(process.execPath, [path.join(repoRoot, 'scripts', 'e2e-lanes.mjs'), 'integration', name], { encoding: 'utf8' }).split('\n').filter(Boolean);
  const iSerial = intLane('serial');
  const iConcurrent = intLane('concurrent');
  const iAlone = intLane('alone');
  const all = e2eFiles(path.join(repoRoot, 'test', 'integration')).sort();

  it('puts every integration file in exactly one lane, and neither lane is empty', () => {
    expect(iSerial.length).toBeGreaterThan(0);
    expect(iConcurrent.length).toBeGreaterThan(0);
    expect(iSerial.filter((f) => iConcurrent.includes(f) || iAlone.includes(f))).toEqual([]);
    expect(iAlone.filter((f) => iConcurrent.includes(f))).toEqual([]);
    expect([...iSerial, ...iConcurrent, ...iAlone].sort()).toEqual(all);
    expect(iAlone.every((f) => /^\/\/ integration-lane: alone\b/m.test(source(f)))).toBe(true);
    // The e2e marker does not move an integration file, nor the reverse.
    expect(serial.some((f) => f.startsWith('test/integration/'))).toBe(false);
    expect(iConcurrent.every((f) => /^\/\/ integration-lane: concurrent\b/m.test(source(f)))).toBe(true);
    // vitest takes the paths as substring filters: a path inside another would run a file twice.
    expect(all.filter((a) => all.some((b) => b !== a && b.includes(a)))).toEqual([]);
  });

  it('runs the integration lanes and counts every report in the one test command', () => {
    const all = readFileSync(path.join(repoRoot, 'scripts', 'test-all.sh'), 'utf8');
    expect(all).toContain('bash scripts/test-e2e.sh "$results" integration || status=1');
    expect(all).not.toMatch(/for project in [a-z ]*integration/);
    expect(all).toContain('alone="$(node scripts/e2e-lanes.mjs integration alone)"');
    expect(all).toContain('--outputFile.json="$results/integration-alone.json" "${alone_files[@]}"');
    expect(all).toContain('"unit", "integration-serial", "integration-concurrent", "security", "e2e-serial", "e2e-concurrent"');
    const e2e = readFileSync(path.join(repoRoot, 'scripts', 'test-e2e.sh'), 'utf8');
    expect(e2e).toContain('npx vitest run --project "$project"');
    expect(e2e).toContain('--outputFile.json="$results/$project-$name.json"');
  });

  it('keeps what only one file may use at a time out of the concurrent lane', () => {
    const global = [
      /\bstartLab\(|runFulcrum\(\[\s*'lab'/, // the lab's fixed pools
      /iptables|nft\b|sysctl|ip6?tables/, // machine-wide packet filters and settings
      /docker|dockerode/i, // one dockerd, containers by name
      /createHosts\(|netns/, // network namespaces (hosts-helper's prefix)
      /Math\.random\(\)/, // addresses or ports drawn from ranges that other files share
      /\.listen\(\s*[1-9]\d*\s*,/, // a fixed listening port
      /pkill|killall/,
    ];
    for (const re of global) expect(iConcurrent.filter((f) => re.test(source(f))), String(re)).toEqual([]);
  });

  it('gives each concurrent file address blocks no other integration file names', () => {
    // Agent files take the 127.76/78/79.<slot> blocks of their slot (agent-fixture.ts, testNet).
    // A slot named through a constant (`const SLOT = 31`) counts too: dataplane-endpoint's was
    // missed that way and shared slot 31 with a concurrent file.
    const slots = (f: string) => new Set([...source(f).matchAll(/\bslot: (\d+)|testNet\('127\.\d+', (\d+)\)|\bSLOT = (\d+)/g)].map((m) => Number(m[1] ?? m[2] ?? m[3])));
    // A fixed block is a /24 written out (127.a.b.c with a > 0); 127.0.x.y are client source
    // addresses and data, never listened on with a fixed port (checked above).
    const blocks = (f: string) => new Set([...source(f).matchAll(/\b127\.([1-9]\d*)\.(\d+)\.\d+/g)].map((m) => `127.${m[1]}.${m[2]}`));
    // A /16 named for building addresses in it (`127.117.${i}.1`, '127.63', 127.117.x).
    const wide = (f: string) => new Set([...source(f).replace(/testNet\([^)]*\)/g, '').matchAll(/\b127\.([1-9]\d*)(?=\.\$\{|\.x\b|['`])/g)].map((m) => `127.${m[1]}`));
    const meets = (o: string, block: string) => blocks(o).has(block) || wide(o).has(block.split('.').slice(0, 2).join('.'));
    // Data, not listened on: the scripted agent (databases/scripted-agent.ts) reports member k of
    // every database at 127.80.0.k and binds nothing, so the files that read those reports may
    // name the same addresses.
    const data = new Set(['127.80.0']);
    for (const f of iConcurrent) {
      const others = all.filter((o) => o !== f);
      // A file may run several agents (fork-from-store: two), each on a slot no other file uses.
      const mine = slots(f);
      for (const s of mine) expect(others.filter((o) => slots(o).has(s)), `agent slot ${s} of ${f}`).toEqual([]);
      for (const b of [...blocks(f)].filter((x) => !data.has(x))) expect(others.filter((o) => meets(o, b)), `block ${b} of ${f}`).toEqual([]);
      for (const w of wide(f)) expect(others.filter((o) => wide(o).has(w) || [...blocks(o)].some((b) => b.startsWith(`${w}.`))), `range ${w} of ${f}`).toEqual([]);
    }
    expect(iConcurrent.filter((f) => slots(f).size > 0).length).toBeGreaterThan(0);
    expect(iConcurrent.filter((f) => slots(f).size > 1).length).toBeGreaterThan(0);
  });
});
