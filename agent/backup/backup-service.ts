import { createHash, randomBytes } from 'node:crypto';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip, createGzip } from 'node:zlib';
import type { Logger } from '../../lib/logger.js';
import type { BackupInfo } from '../../proto/gen/fulcrum/v1/BackupInfo.js';
import type { DatabaseController } from '../database-controller.js';
import { clientError, customerAccountsSql, customerSchemas, SYSTEM_SCHEMAS, SYSTEM_USERS } from '../mysql/customer-data.js';
import { gtidCurrentPos, waitForGtid } from '../mysql/replication.js';
import { q, withAdmin } from '../mysql/admin.js';
import type { ContainerRuntime } from '../runtime/container-runtime.js';
import type { BackupManifest, BackupStorage } from './backup-storage.js';

const DUMP_FILE = 'dump.sql.gz';

export interface TakeOptions {
  type: 'auto' | 'snapshot';
  label: string;
  target: 'primary' | 'secondary';
  /** Creation time from the injected clock. */
  nowMs: number;
}

/**
 * Logical backups and restores (DESIGN §6, issue 8). A backup is one gzip file: the customer's
 * accounts (CREATE OR REPLACE USER + GRANTs, written by the agent) followed by a
 * `mariadb-dump --single-transaction --routines --triggers --events` of every customer schema,
 * with a SHA-256 and a manifest written last. linroot, root and the replication account are
 * not in it: the agent re-applies them from the desired state after a restore, so a backup
 * taken before a credentials reset restores cleanly (reference mysql-dbaas §1.3 caveat).
 */
export function createBackupService(opts: { storage: BackupStorage; runtime: ContainerRuntime; logger: Logger }) {
  const log = opts.logger.child({ component: 'backups' });
  const manifests = new Map<number, BackupManifest[]>();
  const creating = new Map<number, BackupInfo[]>();

  async function refresh(dbId: number): Promise<BackupManifest[]> {
    const list = await opts.storage.list(dbId);
    manifests.set(dbId, list);
    return list;
  }

  function sourceNode(c: DatabaseController, target: 'primary' | 'secondary'): number {
    if (target === 'secondary' || c.clusterSize > 1) {
      const replicas = c.healthyReplicas();
      if (replicas.length > 0) return replicas[0]!;
      if (target === 'secondary' && c.clusterSize > 1) throw new Error('no healthy replica to back up from');
    }
    return c.state!.primary;
  }

  async function usersSql(c: DatabaseController, node: number): Promise<string> {
    return withAdmin(await c.adminTarget(node), (x) => customerAccountsSql(x));
  }

  async function take(c: DatabaseController, o: TakeOptions): Promise<BackupManifest> {
    const s = c.state!;
    if (o.type === 'snapshot') {
      const existing = (await refresh(c.id)).filter((b) => b.type === 'snapshot');
      if (existing.some((b) => b.label === o.label)) throw new Error(`a backup labelled ${o.label} already exists`);
      if (existing.length >= 3) throw new Error('this database already has 3 snapshot backups; delete one first');
    }
    const id = s.nextBackupId++;
    await c.save();
    const placeholder: BackupInfo = { id, label: o.label, type: o.type, createdMs: o.nowMs, sizeBytes: 0, status: 'creating', target: o.target };
    creating.set(c.id, [...(creating.get(c.id) ?? []), placeholder]);
    const started = Date.now();
    try {
      const node = sourceNode(c, o.target);
      const admin = await c.adminTarget(node);
      const { gtid, databases } = await withAdmin(admin, async (x) => ({
        gtid: await gtidCurrentPos(x),
        databases: await customerSchemas(x),
      }));
      const hash = createHash('sha256');
      let size = 0;
      const tap = new Transform({
        transform(chunk: Buffer, _enc, cb) {
          hash.update(chunk);
          size += chunk.length;
          cb(null, chunk);
        },
      });
      const gzip = createGzip({ level: 6 });
      const out = await opts.storage.writer(c.id, id, DUMP_FILE);
      const written = pipeline(gzip, tap, out);
      gzip.write(await usersSql(c, node));
      if (databases.length > 0) {
        const res = await opts.runtime.exec(
          c.nodeName(node),
          ['mariadb-dump', '--user=root', '--single-transaction', '--routines', '--triggers', '--events', '--hex-blob',
            '--master-data=2', '--gtid', '--add-drop-database', '--databases', ...databases],
          { stdout: gzip, env: { MYSQL_PWD: s.adminPassword } },
        );
        if (res.exitCode !== 0) throw new Error(`mariadb-dump failed (${res.exitCode}): ${clientError(res.stderr)}`);
      } else {
        gzip.end();
      }
      await written;
      const manifest: BackupManifest = {
        id, databaseId: c.id, label: o.label, type: o.type, target: node === s.primary ? 'primary' : 'secondary',
        createdMs: o.nowMs, finishedMs: o.nowMs + (Date.now() - started), engineVersion: s.running.version, gtidPos: gtid,
        format: 'mariadb-dump+gzip', file: DUMP_FILE, sizeBytes: size, sha256: hash.digest('hex'), databases,
      };
      await opts.storage.commit(manifest);
      log.info({ database: c.id, backup: id, type: o.type, bytes: size, ms: Date.now() - started, node }, 'backup taken');
      await refresh(c.id);
      return manifest;
    } catch (err) {
      await opts.storage.remove(c.id, id).catch(() => undefined);
      throw err;
    } finally {
      creating.set(c.id, (creating.get(c.id) ?? []).filter((b) => b.id !== id));
    }
  }

  /** Reads the whole file and compares its SHA-256 with the manifest, before anything changes. */
  async function verify(m: BackupManifest): Promise<void> {
    const hash = createHash('sha256');
    try {
      await pipeline(opts.storage.reader(m.databaseId, m.id, m.file), async function* (src) {
        for await (const chunk of src) hash.update(chunk as Buffer);
      });
    } catch (err) {
      throw new Error(`backup ${m.id} cannot be read: ${(err as Error).message}; nothing was changed`);
    }
    const got = hash.digest('hex');
    if (got !== m.sha256) {
      throw new Error(`backup ${m.id} is corrupted: its checksum is ${got.slice(0, 12)}..., the manifest says ${m.sha256.slice(0, 12)}...; nothing was changed`);
    }
  }

  /**
   * Restores in place: verify, stop client traffic at the front proxy, drop the customer's
   * schemas and accounts on the primary, load the dump there with the binlog on (so the
   * replicas are rebuilt from the primary through replication), re-apply linroot from the
   * desired state, wait for the replicas to agree, and let traffic back in. hosts, port and
   * credentials do not change.
   */
  async function restore(c: DatabaseController, backupId: number): Promise<void> {
    const m = (await refresh(c.id)).find((b) => b.id === backupId);
    if (!m) throw new Error(`backup ${backupId} does not exist`);
    await verify(m);
    await c.runExclusive('restore', async () => {
      const s = c.state!;
      const p = s.primary;
      c.pauseTraffic();
      try {
        await withAdmin(await c.adminTarget(p), async (x) => {
          for (const r of await q(x, 'SELECT SCHEMA_NAME AS s FROM information_schema.SCHEMATA')) {
            if (!SYSTEM_SCHEMAS.includes(String(r.s))) await x.query(`DROP DATABASE \`${String(r.s).replace(/`/g, '``')}\``);
          }
          for (const u of await q(x, 'SELECT User, Host FROM mysql.user')) {
            if (!SYSTEM_USERS.includes(String(u.User))) await x.query('DROP USER ?@?', [u.User, u.Host]);
          }
        });
        const input = createGunzip();
        const feeding = pipeline(opts.storage.reader(c.id, m.id, m.file), input).catch((err: Error) => err);
        const res = await opts.runtime.exec(c.nodeName(p), ['mariadb', '--user=root', '--binary-mode'], {
          stdin: input,
          env: { MYSQL_PWD: s.adminPassword },
        });
        // A client that stopped early (an SQL error) leaves input unread; stop feeding it.
        input.destroy();
        const fed = await feeding;
        if (res.exitCode !== 0) throw new Error(`loading backup ${m.id} failed: ${clientError(res.stderr)}`);
        if (fed instanceof Error) throw new Error(`reading backup ${m.id} failed: ${fed.message}`);
        await c.syncAccounts();
        const pos = await withAdmin(await c.adminTarget(p), (x) => gtidCurrentPos(x));
        for (const k of c.healthyReplicas()) {
          await withAdmin(await c.adminTarget(k), (x) => waitForGtid(x, pos, 60));
        }
      } finally {
        await c.observe().catch(() => undefined);
        await c.syncProxies().catch((err) => log.error({ err }, 'front proxy not restored'));
      }
      log.info({ database: c.id, backup: m.id }, 'restored');
    });
  }

  async function remove(c: DatabaseController, backupId: number): Promise<void> {
    const m = (await refresh(c.id)).find((b) => b.id === backupId);
    if (!m) throw new Error(`backup ${backupId} does not exist`);
    await opts.storage.remove(c.id, backupId);
    await refresh(c.id);
  }

  function report(dbId: number): BackupInfo[] {
    const done: BackupInfo[] = (manifests.get(dbId) ?? []).map((m) => ({
      id: m.id, label: m.label, type: m.type, createdMs: m.createdMs, sizeBytes: m.sizeBytes, status: 'ready', target: m.target,
    }));
    return [...done, ...(creating.get(dbId) ?? [])];
  }

  return { take, restore, remove, refresh, report, verify, autoSuffix: () => randomBytes(4).toString('base64url').slice(0, 6) };
}

export type BackupService = ReturnType<typeof createBackupService>;
