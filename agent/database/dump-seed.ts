import { PassThrough } from 'node:stream';
import mysql from 'mysql2/promise';
import { REPL_USER, syncAdminAccounts } from '../mysql/accounts.js';
import { q, withAdmin, type AdminTarget } from '../mysql/admin.js';
import { clientError, customerAccountsSql, customerSchemas, SQL_CLIENT } from '../mysql/customer-data.js';
import type { RemoteMember } from '../mysql/remote.js';
import type { ContainerRuntime } from '../runtime/container-runtime.js';

/**
 * How a rebuilt or new member is seeded once attaching it showed that the primary no longer has
 * its binlog from the position the member needs (a wiped member: from the first GTID; one seeded
 * from a base: from the base's). Tried before, in rejoin(): the store's newest physical base
 * (files; only what came after it is replicated), then the primary's binlog (nothing to copy).
 * What is left: on one host, a dump of the primary over its socket; across hosts, a consistent
 * copy of the primary over TLS (seedFromPrimaryCopy), which needs the primary's address. A member
 * that was seeded from a base too old for the primary's binlog waits for a newer one instead
 * (the archive takes one once the binlog begins after the old base, archiver.ts
 * keepPhysicalRecent): a base is copied as files, the copy reads and loads every row. `none`
 * says why the member cannot be seeded yet; the rejoin is retried.
 */
export function seedAfterPurge(o: { spread: boolean; primary: RemoteMember | undefined; base?: { backupId: number; snapshotGtid: string } }): { way: 'dump' | 'copy' } | { way: 'none'; why: string } {
  if (!o.spread) return { way: 'dump' };
  if (o.base) return { way: 'none', why: `the primary on another host no longer has its binlog from the position of the newest physical base in the store (backup ${o.base.backupId}, ${o.base.snapshotGtid}); a newer base is needed` };
  if (!o.primary) return { way: 'none', why: 'the primary on another host no longer has its whole binlog, and its address is not known yet, so it cannot be copied' };
  return { way: 'copy' };
}

export interface CopySeed {
  /** The primary's GTID position the copy is consistent with (where replication starts). */
  gtid: string;
  ms: number;
}

interface SeedNode {
  name: string;
  admin: AdminTarget;
}

/** What a seed needs to make the member serve as its peers do once the data is loaded. */
interface SeedAccounts {
  adminPassword: string;
  allowList: string[];
  linrootPassword: string;
}

/**
 * Seeds a fresh node on this host from a consistent dump of `source`, the primary on the same
 * host, over its socket (the dump runs in the primary's node). See loadConsistentDump.
 */
export async function seedFromLocalDump(o: SeedAccounts & { runtime: ContainerRuntime; source: SeedNode; target: SeedNode }): Promise<CopySeed> {
  const started = Date.now();
  const { schemas, accounts } = await withAdmin(o.source.admin, async (c) => ({
    schemas: await customerSchemas(c),
    accounts: await customerAccountsSql(c),
  }));
  const gtid = await loadConsistentDump({
    ...o, target: o.target, schemas, accounts,
    dump: { name: o.source.name, args: ['--user=root'], env: { MYSQL_PWD: o.adminPassword } },
  });
  return { gtid, ms: Date.now() - started };
}

/**
 * Seeds member k (running on its own empty data, wiped or just made) with a consistent copy of the
 * primary on another host, when neither a base in a shared store nor the primary's binlog can.
 * No new listener: the member's own mariadb-dump dials the primary's MariaDB as the replication
 * account over TLS verified against the cluster CA (the member's @@ssl_ca) and the address
 * dialled, as replication does (the agent's admin account, root, is local to each node and never
 * reachable from another host). The customer's accounts are read first, over the same TLS, by
 * the agent. See loadConsistentDump. Throws on any failure; the caller wipes the node before the
 * next try.
 */
export async function seedFromPrimaryCopy(o: SeedAccounts & { runtime: ContainerRuntime; target: SeedNode; primary: RemoteMember }): Promise<CopySeed> {
  const started = Date.now();
  const p = o.primary;
  const c = await mysql.createConnection({
    host: p.host, port: p.port, user: REPL_USER, password: p.password, connectTimeout: 5000,
    ssl: { ca: p.caPem, rejectUnauthorized: true },
  });
  let schemas: string[];
  let accounts: string;
  try {
    schemas = await customerSchemas(c);
    accounts = await customerAccountsSql(c);
  } finally {
    await c.end().catch(() => c.destroy());
  }
  const ca = await withAdmin(o.target.admin, async (x) => String((await q(x, 'SELECT @@ssl_ca AS ca'))[0]?.ca ?? ''));
  if (!ca) throw new Error('the member has no cluster CA to verify the primary with');
  const gtid = await loadConsistentDump({
    ...o, schemas, accounts,
    dump: {
      name: o.target.name,
      args: ['--protocol=TCP', `--host=${p.host}`, `--port=${p.port}`, `--user=${REPL_USER}`, '--ssl', `--ssl-ca=${ca}`, '--ssl-verify-server-cert'],
      env: { MYSQL_PWD: p.password },
    },
  });
  return { gtid, ms: Date.now() - started };
}

/**
 * The loading both dump seeds share. The customer's accounts (read before the snapshot: an
 * account made while the dump runs replicates afterwards as its CREATE USER, which a copy taken
 * after the snapshot would make fail on the member) are fed first, then mariadb-dump's output.
 * `--single-transaction` takes one InnoDB snapshot (START TRANSACTION WITH CONSISTENT SNAPSHOT)
 * and with `--master-data=1 --gtid` the dump reads that snapshot's binlog position
 * (Binlog_snapshot_file/position, BINLOG_GTID_POS) instead of taking a global read lock, so the
 * source keeps serving writes while it is read; the dump ends with `SET GLOBAL gtid_slave_pos`
 * at that position. The dump is piped into the target's `mariadb` client with the binlog off:
 * memory stays at the pipe's buffers (`--quick`: rows are streamed, never a whole table held),
 * whatever the size. Then linroot is made from the desired state, and the target's binlog starts
 * at the copy's position (RESET MASTER, gtid_binlog_state, as a base seed does), so a member later
 * seeded by replaying the target's binlog is told the history before it is not there. Returns
 * that position; the caller's attach (MASTER_USE_GTID=slave_pos) streams what came after.
 */
async function loadConsistentDump(o: SeedAccounts & {
  runtime: ContainerRuntime;
  target: SeedNode;
  schemas: string[];
  accounts: string;
  dump: { name: string; args: string[]; env: Record<string, string> };
}): Promise<string> {
  await withAdmin(o.target.admin, async (x) => {
    await x.query('STOP SLAVE');
    await x.query('RESET SLAVE ALL');
  });
  // Customer schema names go after `--` so that none is read as an option (docs/security/secrets.md).
  const what = o.schemas.length > 0
    ? ['--routines', '--triggers', '--events', '--hex-blob', '--databases', '--', ...o.schemas]
    : ['--no-create-db', '--no-create-info', '--no-data', '--skip-triggers', '--databases', 'mysql'];
  const dump = new PassThrough();
  const feed = new PassThrough();
  feed.write('SET SESSION sql_log_bin=0;\n');
  feed.write(o.accounts);
  dump.pipe(feed);
  const dumping = o.runtime.exec(o.dump.name, ['mariadb-dump', ...o.dump.args, '--single-transaction', '--master-data=1', '--gtid', '--quick', ...what], { stdout: dump, env: o.dump.env });
  const load = await o.runtime.exec(o.target.name, [...SQL_CLIENT, '--user=root', '--binary-mode'], { stdin: feed, env: { MYSQL_PWD: o.adminPassword } });
  // A load that stopped early must not leave the dump blocked on a full pipe.
  if (load.exitCode !== 0) dump.destroy();
  const out = await dumping;
  if (load.exitCode !== 0) throw new Error(`loading the dump failed: ${clientError(load.stderr)}`);
  if (out.exitCode !== 0) throw new Error(`dumping the primary failed: ${clientError(out.stderr)}`);
  return withAdmin(o.target.admin, async (x) => {
    await x.query('SET SESSION sql_log_bin=0');
    await syncAdminAccounts(x, o.allowList, o.linrootPassword);
    const pos = String((await q(x, 'SELECT @@gtid_slave_pos AS p'))[0]?.p ?? '');
    if (!pos) throw new Error('the dump carried no GTID position');
    await x.query('RESET MASTER');
    await x.query('SET GLOBAL gtid_binlog_state = ?', [pos]);
    await x.query('SET GLOBAL gtid_slave_pos = ?', [pos]);
    return pos;
  });
}
