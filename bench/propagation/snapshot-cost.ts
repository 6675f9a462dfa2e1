/**
 * `node dist/bench/propagation/snapshot-cost.js STATE_DIR/control-plane.sqlite [--rounds N]`:
 * where the seconds of a config push go with a large configuration, measured on a copy of a
 * control plane's database (bench:propagation --keep leaves one in cp-large/). Times, per round:
 *   build      buildNodeBalancers(repo, '*'), the rows -> proto objects step (once per push round)
 *   hash       the content hash that decides the version
 *   serialize  grpc-js/protobufjs encoding of the ConfigSnapshot
 *   decode     the data plane's decoding of the same bytes
 * Works on a temporary copy (opening runs migrations), so the given database is left as it is.
 */
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseFlags } from '../../lib/args.js';
import { loadConfigProto } from '../../lib/grpc.js';
import { openDatabase } from '../../control-plane/store/sqlite/database.js';
import { sqliteNodeBalancers } from '../../control-plane/store/sqlite/nodebalancer-repository.js';
import { buildNodeBalancers } from '../../control-plane/push/snapshot-builder.js';
import { contentHash as hashNodeBalancers } from '../../control-plane/push/snapshot-cache.js';
import { fmt, median, table } from '../common/stats.js';

async function main(): Promise<void> {
  const [file, ...rest] = process.argv.slice(2);
  if (!file) throw new Error('usage: snapshot-cost.js CONTROL_PLANE_SQLITE [--rounds N]');
  const f = parseFlags(rest, { rounds: 'number' });
  const rounds = (f.rounds as number | undefined) ?? 5;
  const dir = mkdtempSync(join(tmpdir(), 'fulcrum-snapshot-cost-'));
  const copy = join(dir, 'control-plane.sqlite');
  copyFileSync(file, copy);
  // The copy's secrets open with the original's key file (docs/security/secrets.md).
  const db = openDatabase(copy, { kekFile: join(dirname(file), 'keys', 'kek') });
  try {
    const repo = sqliteNodeBalancers(db);
    const proto = loadConfigProto() as any;
    const stream = proto.fulcrum.v1.ConfigService.service.Stream;
    const t: Record<string, number[]> = { build: [], hash: [], serialize: [], decode: [] };
    let bytes = 0;
    let count = 0;
    for (let i = 0; i < rounds; i++) {
      let t0 = performance.now();
      const nbs = await buildNodeBalancers(repo, '*');
      t.build!.push(performance.now() - t0);
      t0 = performance.now();
      hashNodeBalancers(nbs);
      t.hash!.push(performance.now() - t0);
      t0 = performance.now();
      const buf = stream.responseSerialize({ version: 1, nonce: 'bench', nodebalancers: nbs }) as Buffer;
      t.serialize!.push(performance.now() - t0);
      t0 = performance.now();
      stream.responseDeserialize(buf);
      t.decode!.push(performance.now() - t0);
      bytes = buf.length;
      count = nbs.length;
    }
    process.stdout.write(`${count} NodeBalancers, snapshot ${fmt(bytes / 1024)} KiB on the wire, ${rounds} rounds\n`);
    const rows = Object.entries(t).map(([k, xs]) => [k, fmt(median(xs), 1), fmt(Math.max(...xs), 1)]);
    process.stdout.write(table([['step', 'median ms', 'max ms'], ...rows]) + '\n');
  } finally {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
