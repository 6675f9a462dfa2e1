// e2e-lane: concurrent (port 0, an address block of its own held host-wide (test/helpers/store-lab.ts: endpoints, nodes, the store's address), temp folders, process runtime only).
/**
 * The object store's acceptance through the control plane and the API (docs/agent.md, "Backup
 * store"; docs/databases.md, `oldest_restore_time` under "Objects" and the lag under "Events"): one `fulcrum agent` process backs up
 * to a real S3-compatible store (Swift + s3api over TLS, test/helpers/object-store.ts) and runs a
 * 1-node and a 3-node database (POST /v4/databases/mysql/instances, cluster_size 1 and 3), each
 * written every 100 ms through its hosts.primary.
 *
 * 1. Snapshots (POST .../backups), auto backups (the day claimed in the control plane's store, as
 *    its scheduler does at midnight), the archive's physical bases and its binlog segments are
 *    listed in the store for both databases; no file of the store holds a row value (a text
 *    marker and slices of a random 64 KiB blob, which gzip would keep as they are), every object
 *    is sealed (none starts as gzip), and the agent's state folder keeps no dump, base, segment or
 *    spool file.
 * 2. The store stopped for 60 s under the writes: not one write fails, on either database; the
 *    archive's lag shows in an account event and in the agent's
 *    `fulcrum_agent_binlog_archive_lag_seconds`; `oldest_restore_time`, read every second, always
 *    names a second that the store, frozen while it is stopped, holds a base and an unbroken chain
 *    of segments for; once it returns, the archive catches up (an event, segments closed after
 *    it, the metric back down) and snapshots are stored again.
 *
 * An agent SIGKILLed mid-upload leaving nothing listed is shown through the control plane by
 * store-fork-elsewhere.test.ts (agent A killed during a multipart upload of its archive).
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Connection } from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { basesOf } from '../../../agent/binlog/archiver.js';
import { planRestore } from '../../../agent/binlog/chain.js';
import type { BackupManifest } from '../../../agent/backup/backup-storage.js';
import { sealManifests } from '../../../agent/backup/sealed-manifest.js';
import type { SegmentManifest } from '../../../agent/binlog/segment-storage.js';
import { parseWireTime } from '../../../lib/clock.js';
import { utcDay } from '../../../lib/utc-day.js';
import { engineOfSeries } from '../../helpers/engines.js';
import { startRowWriter, type RowWriter } from '../../helpers/row-writer.js';
import { startStoreLab, type StoreLab } from '../../helpers/store-lab.js';
import { MYSQL, connectFrom, until } from './db-lab.js';

const CLIENT = '127.64.0.3';
/** The agent's --binlog-archive-interval (seconds): "behind" once three rounds failed (6 s). */
const ARCHIVE_S = 2;
const OUTAGE_MS = 60_000;
const LAG = 'fulcrum_agent_binlog_archive_lag_seconds';

interface Db {
  id: number;
  size: 1 | 3;
  connect: () => Promise<Connection>;
  writer?: RowWriter;
}

interface Listing { backups: BackupManifest[]; segments: SegmentManifest[] }

/** Every file under `dir` (none when it does not exist). */
function filesUnder(dir: string): string[] {
  try {
    return readdirSync(dir, { recursive: true, withFileTypes: true }).filter((f) => f.isFile()).map((f) => join(f.parentPath, f.name));
  } catch {
    return [];
  }
}

describe('backups and the binlog archive of a 1-node and a 3-node database in the object store, and a 60 s store outage', () => {
  let lab: StoreLab;
  const dbs: Db[] = [];
  /** A value of a row of each database that no file of the store may hold. */
  const text = `store-outage-plaintext-${randomBytes(8).toString('hex')}`;
  /**
   * Random bytes in a row of each database: incompressible, so gzip stores them as they are and
   * an unencrypted copy of a base or a segment would hold these slices verbatim.
   */
  const blob = randomBytes(64 * 1024);
  const needles = [0, 20_000, 50_000].map((at) => blob.subarray(at, at + 32));

  /**
   * The store's backups of a database as its agent reads them: labels are sealed with the
   * database's backup key (agent/backup/sealed-manifest.ts), taken here from the agent's state.
   */
  const backupsOf = (id: number) => sealManifests(lab.reader.backups, (db) => {
    const file = join(lab.agents[0]!.dir, 'databases', String(db), 'state.json');
    return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as { backupKey?: string }).backupKey : undefined;
  }).list(id);
  const listing = async (id: number): Promise<Listing> => ({ backups: await backupsOf(id), segments: await lab.reader.segments.list(id) });
  const events = async (id: number) => ((await lab.ok('GET', '/v4/account/events?page_size=100')).data as { entity: { id: number } | null; action: string; status: string; message: string | null }[])
    .filter((e) => e.entity?.id === id);

  beforeAll(async () => {
    lab = await startStoreLab({ name: 'storeout', agents: 1, archiveS: ARCHIVE_S });
  }, 400_000);

  afterAll(async () => {
    await lab?.store.resume().catch(() => undefined);
    for (const d of dbs) await d.writer?.stop().catch(() => undefined);
    await lab?.close();
  });

  it('snapshots, auto backups, bases and segments of both databases are in the store, sealed, and none stays on the agent', async () => {
    onTestFailed(() => console.log(lab.explain()));
    const { ok } = lab;
    const agent = lab.agents[0]!;
    const engine = engineOfSeries((await ok('GET', '/v4/fulcrum/agents')).data.find((a: { id: string }) => a.id === agent.id).engines);
    const made = [
      await ok('POST', MYSQL, { label: 'storeout-one', region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 1, allow_list: ['0.0.0.0/0'] }),
      await ok('POST', MYSQL, { label: 'storeout-three', region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 3, replication_type: 'semi_synch', allow_list: ['0.0.0.0/0'] }),
    ];
    const active = await Promise.all(made.map((m) => lab.waitStatus(m.id, 'active')));
    for (const [i, db] of active.entries()) {
      expect(Object.keys(db.members)).toHaveLength(i === 0 ? 1 : 3);
      const { password, ca } = await lab.credentials(db.id);
      const connect = () => connectFrom({ source: CLIENT, host: db.hosts.primary, port: 3306, user: 'linroot', password, ca });
      const c = await until(`database ${db.id} through hosts.primary`, () => connect().catch(() => undefined), 120_000, 500);
      await c.query('CREATE DATABASE app');
      await c.query('CREATE TABLE app.t (id INT PRIMARY KEY, ts DECIMAL(17,6) NOT NULL)');
      await c.query('CREATE TABLE app.marker (v VARCHAR(64) NOT NULL, b LONGBLOB NOT NULL)');
      await c.query('INSERT INTO app.marker VALUES (?, ?)', [text, blob]);
      await c.end();
      dbs.push({ id: db.id, size: i === 0 ? 1 : 3, connect, writer: startRowWriter({ connect }) });
    }
    // The archive's first round takes a physical base: from then on a second can be restored.
    for (const d of dbs) await until(`database ${d.id}'s oldest_restore_time`, async () => (await ok('GET', `${MYSQL}/${d.id}`)).oldest_restore_time || undefined, 180_000, 500);

    // An auto backup for tomorrow's day, claimed as the control plane's scheduler claims each day
    // at midnight (control-plane/domain/databases/backup-schedule.ts); the snapshots' operations
    // push the desired state that carries it to the agent.
    const day = utcDay(Date.now() + 86_400_000);
    for (const d of dbs) expect(await lab.cp.context.store.databases.claimBackupSlot(d.id, day, Date.now())).toBe(true);
    for (const d of dbs) await ok('POST', `${MYSQL}/${d.id}/backups`, { label: 'under_writes' });
    for (const d of dbs) {
      await until(`database ${d.id}: a snapshot, an auto backup, a physical base and segments after them in the store`, async () => {
        const { backups, segments } = await listing(d.id);
        const done = backups.filter((b) => b.type !== 'base').map((b) => b.finishedMs);
        return backups.some((b) => b.type === 'snapshot' && b.label === 'under_writes') && backups.some((b) => b.type === 'auto')
          && backups.some((b) => b.type === 'base' && b.format.startsWith('mariadb-backup+'))
          && segments.some((s) => s.closedMs > Math.max(...done)) || undefined;
      }, 180_000, 1000);
      // The API lists what the store holds (the hidden bases are not the customer's).
      await until(`database ${d.id}'s auto backup and snapshot in the API`, async () => {
        const listed = (await ok('GET', `${MYSQL}/${d.id}/backups`)).data as { type: string }[];
        return listed.map((b) => b.type).sort().join() === 'auto,snapshot' || undefined;
      }, 60_000, 500);
    }

    // Sealed: no file of the store holds a row value, and no object starts as gzip (an
    // unencrypted dump, base or segment, or the first part of one, would); every listed object
    // is one sealed file (backup-crypto.ts's header), its first part for a multipart one.
    // Listed first: every object listed then has its file by the time they are read.
    let objects = 0;
    for (const d of dbs) {
      const { backups, segments } = await listing(d.id);
      objects += backups.length + segments.length;
    }
    const files = lab.storeFiles();
    const holding = files.filter((f) => {
      const bytes = lab.storeFile(f);
      return bytes !== undefined && (bytes.includes(text) || needles.some((n) => bytes.includes(n)));
    });
    expect(holding).toEqual([]);
    const heads = files.filter((f) => f.endsWith('.data')).map((f) => ({ f, head: lab.storeFile(f)?.subarray(0, 4) }));
    expect(heads.filter((x) => x.head?.[0] === 0x1f && x.head[1] === 0x8b).map((x) => x.f)).toEqual([]);
    expect(heads.filter((x) => x.head?.toString('latin1') === 'FBK1').length).toBeGreaterThanOrEqual(objects);

    // Nothing local: no backups folder content, and once a round's copy is shipped no spool.
    expect(filesUnder(join(agent.dir, 'backups'))).toEqual([]);
    const local = (f: string) => /backup-spool|binlog-spool\/.|\.mbstream$|\.gz(\.aes)?$|manifest\.json$/.test(f);
    await until('no dump, base, segment or spool file on the agent', () => filesUnder(agent.dir).every((f) => !local(f)) || undefined, 60_000, 250)
      .catch((err: Error) => {
        throw new Error(`${err.message}: ${filesUnder(agent.dir).filter(local).join(', ')}`);
      });
    expect(filesUnder(agent.dir).length).toBeGreaterThan(0);
    console.log(`[store-outage] databases ${dbs.map((d) => `${d.id} (${d.size} node${d.size > 1 ? 's' : ''})`).join(', ')}: ${objects} objects listed; ${heads.length} files in Swift, none holding a row value`);
  }, 900_000);

  it('the store stopped for 60 s under writes: every write served, the lag shown, oldest_restore_time restorable throughout, then the archive and backups resume', async () => {
    onTestFailed(() => console.log(lab.explain()));
    const { ok, store } = lab;
    const agent = lab.agents[0]!;
    expect(dbs).toHaveLength(2);
    const rowsBefore = dbs.map((d) => d.writer!.rows.length);
    await until('writes going on', () => dbs.every((d, i) => d.writer!.rows.length > rowsBefore[i]! + 5) || undefined, 60_000, 100);
    // What the store holds when it stops: nothing can be written to it or deleted from it until
    // it returns, so this is what it can give back throughout the outage.
    const frozen = new Map<number, Listing>();
    for (const d of dbs) frozen.set(d.id, await listing(d.id));
    await store.pause();
    const pausedAt = Date.now();
    const seen = new Map<number, Set<string>>(dbs.map((d) => [d.id, new Set()]));
    let lagDuring = 0;
    try {
      while (Date.now() - pausedAt < OUTAGE_MS) {
        const t = Date.now();
        for (const d of dbs) {
          const o = (await ok('GET', `${MYSQL}/${d.id}`)).oldest_restore_time as string | null;
          expect(o, `database ${d.id}'s oldest_restore_time during the outage`).not.toBeNull();
          seen.get(d.id)!.add(o!);
        }
        if (Date.now() - pausedAt > OUTAGE_MS - 10_000) lagDuring = Math.max(lagDuring, await lab.metric(agent, LAG));
        await new Promise((r) => setTimeout(r, Math.max(0, 1000 - (Date.now() - t))));
      }
      // The lag: an event per database, and the metric (the most-behind database's).
      for (const d of dbs) {
        await until(`database ${d.id}'s "behind" event`, async () => (await events(d.id)).find((e) => e.action === 'database_backup_create' && /^the binlog archive is \d+ s behind: [\s\S]*; retrying$/.test(e.message ?? '')), 30_000, 500);
      }
      expect(lagDuring).toBeGreaterThan(40);
    } finally {
      await store.resume();
    }
    const resumedAt = Date.now();
    // Every write went through during the outage, on both databases.
    for (const [i, d] of dbs.entries()) {
      expect(d.writer!.failures, `database ${d.id}`).toEqual([]);
      const during = d.writer!.rows.filter((r) => r.ackMs > pausedAt && r.ackMs < pausedAt + OUTAGE_MS).length;
      expect(during, `database ${d.id}: writes acknowledged during the outage`).toBeGreaterThan(60);
      expect(d.writer!.rows.length).toBeGreaterThan(rowsBefore[i]!);
    }
    // Every oldest_restore_time shown during the outage is a second the stopped store can restore:
    // a base finished by then and stored segments from it without a gap past that second.
    for (const d of dbs) {
      const { backups, segments } = frozen.get(d.id)!;
      const values = [...seen.get(d.id)!];
      expect(values.length).toBeGreaterThan(0);
      for (const v of values) expect(planRestore(basesOf(backups), segments, parseWireTime(v)), `database ${d.id}: oldest_restore_time ${v}`).toBeDefined();
    }

    // The archive resumes: caught up (an event), segments closed after the store returned, the lag down.
    let caughtUpS = 0;
    for (const d of dbs) {
      await until(`database ${d.id}'s "caught up" event`, async () => (await events(d.id)).find((e) => /^the binlog archive caught up/.test(e.message ?? '')), 120_000, 500);
      await until(`database ${d.id}: a segment closed after the outage`, async () => (await lab.reader.segments.list(d.id)).some((s) => s.closedMs > resumedAt) || undefined, 120_000, 1000);
    }
    await until('the lag metric back down', async () => (await lab.metric(agent, LAG)) < 20 || undefined, 60_000, 500);
    caughtUpS = (Date.now() - resumedAt) / 1000;
    // And backups: a snapshot of each is stored again.
    for (const d of dbs) await ok('POST', `${MYSQL}/${d.id}/backups`, { label: 'after_outage' });
    for (const d of dbs) {
      await until(`database ${d.id}'s snapshot after the outage in the store`, async () => (await backupsOf(d.id)).some((b) => b.type === 'snapshot' && b.label === 'after_outage') || undefined, 180_000, 1000);
    }
    for (const d of dbs) await d.writer!.stop();
    for (const d of dbs) expect(d.writer!.failures, `database ${d.id}`).toEqual([]);
    console.log(`[store-outage] outage ${OUTAGE_MS / 1000} s: lag metric ${lagDuring} s at its end; caught up (events, segments, metric) ${caughtUpS} s and snapshots stored ${(Date.now() - resumedAt) / 1000} s after the store returned; writes ${dbs.map((d) => d.writer!.rows.length).join(' and ')}, none failed; oldest_restore_time shown ${dbs.map((d) => [...seen.get(d.id)!].join('/')).join(' and ')}`);
  }, 900_000);
});
