import { PassThrough } from 'node:stream';
import mysql from 'mysql2/promise';
import { REPL_USER, syncAdminAccounts } from '../mysql/accounts.js';
import { accountChangesBetween, binlogEnd, dumpSnapshotPoint } from '../mysql/account-changes.js';
import { q, withAdmin, type AdminConnection, type AdminTarget } from '../mysql/admin.js';
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
  /** Tables in an engine other than InnoDB (`schema.table (ENGINE)`): copied outside the snapshot. */
  outside: string[];
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

/** Runs `fn` on a new session to the source, closed after. */
type SourceSession = <T>(fn: (c: AdminConnection) => Promise<T>) => Promise<T>;

/**
 * Seeds a fresh node on this host from a consistent dump of `source`, the primary on the same
 * host, over its socket (the dump runs in the primary's node). See loadConsistentDump.
 */
export async function seedFromLocalDump(o: SeedAccounts & { runtime: ContainerRuntime; source: SeedNode; target: SeedNode }): Promise<CopySeed> {
  const started = Date.now();
  const r = await loadConsistentDump({
    ...o, target: o.target,
    source: (fn) => withAdmin(o.source.admin, fn),
    dump: { name: o.source.name, args: ['--user=root'], env: { MYSQL_PWD: o.adminPassword } },
  });
  return { ...r, ms: Date.now() - started };
}

/**
 * Seeds member k (running on its own empty data, wiped or just made) with a consistent copy of the
 * primary on another host, when neither a base in a shared store nor the primary's binlog can.
 * No new listener: the member's own mariadb-dump dials the primary's MariaDB as the replication
 * account over TLS verified against the cluster CA (the member's @@ssl_ca) and the address
 * dialled, as replication does (the agent's admin account, root, is local to each node and never
 * reachable from another host). The customer's accounts are read over the same TLS, by the
 * agent. See loadConsistentDump. Throws on any failure; the caller wipes the node before the
 * next try.
 */
export async function seedFromPrimaryCopy(o: SeedAccounts & { runtime: ContainerRuntime; target: SeedNode; primary: RemoteMember; stallMs?: number }): Promise<CopySeed> {
  const started = Date.now();
  const p = o.primary;
  const source: SourceSession = async (fn) => {
    const c = await mysql.createConnection({
      host: p.host, port: p.port, user: REPL_USER, password: p.password, connectTimeout: 5000,
      ssl: { ca: p.caPem, rejectUnauthorized: true },
    });
    try {
      return await fn(c);
    } finally {
      await c.end().catch(() => c.destroy());
    }
  };
  const ca = await withAdmin(o.target.admin, async (x) => String((await q(x, 'SELECT @@ssl_ca AS ca'))[0]?.ca ?? ''));
  if (!ca) throw new Error('the member has no cluster CA to verify the primary with');
  const r = await loadConsistentDump({
    ...o, source,
    dump: {
      name: o.target.name,
      args: ['--protocol=TCP', `--host=${p.host}`, `--port=${p.port}`, `--user=${REPL_USER}`, '--ssl', `--ssl-ca=${ca}`, '--ssl-verify-server-cert'],
      env: { MYSQL_PWD: p.password },
    },
  });
  return { ...r, ms: Date.now() - started };
}

/** How many times in a row a copy starts over because the accounts changed under it. */
export const ACCOUNT_TRIES = 5;
/** How long a dump may send nothing while the member's load waits for it (see watchStall). */
const STALL_MS = 120_000;
/** How much of the dump's start is read for its binlog position (it is in the first few KB). */
const HEAD_MAX = 1 << 20;

/**
 * The loading both dump seeds share. The customer's accounts are read before the snapshot: an
 * account made while the dump runs replicates afterwards as its CREATE USER, which would fail on
 * a member whose copy already had it. The privilege tables are not transactional, so an account
 * statement binlogged between that read and the snapshot would leave the member with accounts
 * of another moment than its data (one missing, an old password, one dropped since) for good.
 * So the source's binlog end is noted before the read, mariadb-dump's snapshot position is read
 * from the top of its output, and the binlog between the two is searched for account changes
 * (account-changes.ts): if there is one, nothing has been loaded yet; the dump is stopped, and
 * the accounts are read again and a new dump started, ACCOUNT_TRIES times at most (then the copy
 * fails and is retried later as any failed copy is). Why that is exact: docs/multi-host.md, "How
 * a new member is seeded".
 * `--single-transaction` takes one InnoDB snapshot (START TRANSACTION WITH CONSISTENT SNAPSHOT)
 * and with `--master-data=1 --gtid` the dump reads that snapshot's binlog position
 * (Binlog_snapshot_file/position, BINLOG_GTID_POS) instead of taking a global read lock, so the
 * source keeps serving writes while it is read; the dump ends with `SET GLOBAL gtid_slave_pos`
 * at that position (a load cut short leaves the member without a position). The accounts and
 * the dump are piped into the target's `mariadb` client with the binlog off: memory stays at the
 * pipe's buffers (`--quick`: rows are streamed, never a whole table held), whatever the size.
 * Then linroot is made from the desired state, and the target's binlog starts at the copy's
 * position (RESET MASTER, gtid_binlog_state, as a base seed does), so a member later seeded by
 * replaying the target's binlog is told the history before it is not there. The caller's attach
 * (MASTER_USE_GTID=slave_pos) streams what came after. A target that already holds customer
 * schemas (a copy that did not finish) is refused: loading over it would keep what the source
 * dropped since.
 */
async function loadConsistentDump(o: SeedAccounts & {
  runtime: ContainerRuntime;
  target: SeedNode;
  source: SourceSession;
  dump: { name: string; args: string[]; env: Record<string, string> };
  stallMs?: number;
}): Promise<Omit<CopySeed, 'ms'>> {
  await withAdmin(o.target.admin, async (x) => {
    const left = await customerSchemas(x);
    if (left.length > 0) throw new Error(`the member already holds ${left.length} schema(s), left by a copy that did not finish: it is wiped before it is copied again`);
    await x.query('STOP SLAVE');
    await x.query('RESET SLAVE ALL');
  });
  for (let attempt = 1; ; attempt++) {
    const read = await o.source(async (c) => ({
      from: await binlogEnd(c),
      schemas: await customerSchemas(c),
      accounts: await customerAccountsSql(c),
      outside: await outsideSnapshot(c),
    }));
    if (!read.from) throw new Error('the primary has no binlog');
    // Customer schema names go after `--` so that none is read as an option (docs/security/secrets.md).
    const what = read.schemas.length > 0
      ? ['--routines', '--triggers', '--events', '--hex-blob', '--databases', '--', ...read.schemas]
      : ['--no-create-db', '--no-create-info', '--no-data', '--skip-triggers', '--databases', 'mysql'];
    const dump = new PassThrough();
    const stop = new AbortController();
    const dumping = o.runtime.exec(o.dump.name, ['mariadb-dump', ...o.dump.args, '--single-transaction', '--master-data=1', '--gtid', '--quick', ...what], { stdout: dump, env: o.dump.env, signal: stop.signal });
    // Awaited only once the head is read (or the load is done): a dump that fails to start (its
    // node gone, the program missing) rejects meanwhile, which must not end the agent.
    dumping.catch(() => undefined);
    // Stops a dump nothing reads: its output is let through to nowhere so that it ends.
    const cancel = async () => {
      dump.resume();
      stop.abort();
      return dumping;
    };
    const stallMs = o.stallMs ?? STALL_MS;
    const head = await readHead(dump, stallMs);
    const at = dumpSnapshotPoint(head.toString('latin1'));
    if (!at) {
      const out = await cancel();
      const why = out.exitCode !== 0 && !/cancelled/.test(out.stderr) ? clientError(out.stderr)
        : head.length === 0 ? `it sent nothing for ${Math.round(stallMs / 1000)} s` : 'its output named no binlog position';
      throw new Error(`dumping the primary failed: ${why}`);
    }
    let changed: string[];
    try {
      changed = await o.source((c) => accountChangesBetween(c, read.from!, at));
    } catch (err) {
      await cancel();
      throw err;
    }
    if (changed.length > 0) {
      await cancel();
      if (attempt >= ACCOUNT_TRIES) {
        throw new Error(`the customer's accounts changed on the primary between the copy's reading of them and its snapshot, ${attempt} times in a row (last at ${changed.slice(0, 3).join(', ')})`);
      }
      continue;
    }
    const feed = new PassThrough();
    // Its failure is the load's to report (through the runtime), never an unhandled error here.
    feed.on('error', () => undefined);
    feed.write('SET SESSION sql_log_bin=0;\n');
    feed.write(read.accounts);
    feed.write(head);
    dump.pipe(feed);
    const stalled = watchStall(dump, feed, stallMs, () => {
      // Both programs are stopped: the load must not take the dump's end for a whole one.
      feed.destroy(new Error('the dump stalled'));
      stop.abort();
    });
    const load = await o.runtime.exec(o.target.name, [...SQL_CLIENT, '--user=root', '--binary-mode'], { stdin: feed, env: { MYSQL_PWD: o.adminPassword } });
    // A load that stopped early must not leave the dump blocked on a full pipe.
    if (load.exitCode !== 0) dump.destroy();
    const out = await dumping;
    stalled.stop();
    if (stalled.fired) throw new Error(`dumping the primary failed: it sent nothing for ${Math.round(stallMs / 1000)} s while the member waited (the primary or the link to it is gone)`);
    if (load.exitCode !== 0) throw new Error(`loading the dump failed: ${clientError(load.stderr)}`);
    if (out.exitCode !== 0) throw new Error(`dumping the primary failed: ${clientError(out.stderr)}`);
    const gtid = await withAdmin(o.target.admin, async (x) => {
      await x.query('SET SESSION sql_log_bin=0');
      await syncAdminAccounts(x, o.allowList, o.linrootPassword);
      const pos = String((await q(x, 'SELECT @@gtid_slave_pos AS p'))[0]?.p ?? '');
      if (!pos) throw new Error('the dump carried no GTID position');
      await x.query('RESET MASTER');
      await x.query('SET GLOBAL gtid_binlog_state = ?', [pos]);
      await x.query('SET GLOBAL gtid_slave_pos = ?', [pos]);
      return pos;
    });
    return { gtid, outside: read.outside };
  }
}

/**
 * Stops a dump that sends nothing while the load waits for it, after `ms`: mariadb-dump has no
 * read timeout, so a primary whose host or link is gone (no FIN, no RST) would hold the copy,
 * and the database's action lock, until TCP keepalive gives up hours later. Bytes queued in
 * either stream mean the load is the slow side (a long statement), which is no stall.
 */
function watchStall(dump: PassThrough, feed: PassThrough, ms: number, fire: () => void): { fired: boolean; stop: () => void } {
  const w = { fired: false, stop: () => clearInterval(timer) };
  let moved = 0;
  let seen = -1;
  let quietSince = Date.now();
  dump.on('data', (c: Buffer) => (moved += c.length));
  const timer = setInterval(() => {
    if (moved !== seen || dump.readableLength > 0 || feed.readableLength > 0) {
      seen = moved;
      quietSince = Date.now();
    } else if (Date.now() - quietSince >= ms) {
      w.fired = true;
      w.stop();
      fire();
    }
  }, Math.max(50, Math.min(1000, ms / 4)));
  return w;
}

/**
 * The first bytes of a dump, up to and with the line naming its binlog position (or HEAD_MAX,
 * its end, or what came within `ms` when it stopped sending); the stream is left paused after
 * them, so nothing is lost to whoever reads on.
 */
function readHead(s: PassThrough, ms: number): Promise<Buffer> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const timer = setTimeout(() => done(), ms);
    const done = () => {
      clearTimeout(timer);
      s.off('data', onData);
      s.off('end', done);
      s.off('error', done);
      s.pause();
      resolve(Buffer.concat(chunks));
    };
    const onData = (chunk: Buffer) => {
      chunks.push(chunk);
      size += chunk.length;
      timer.refresh();
      if (size >= HEAD_MAX || dumpSnapshotPoint(Buffer.concat(chunks).toString('latin1'))) done();
    };
    s.on('data', onData);
    s.once('end', done);
    s.once('error', done);
  });
}

/**
 * The customer's tables in an engine other than InnoDB (MyISAM, Aria...): mariadb-dump's snapshot
 * covers InnoDB only, so these are read as they are when the dump reaches them, and may hold
 * writes from after the copy's position (applied twice on the member) or lack some from before.
 */
async function outsideSnapshot(c: AdminConnection): Promise<string[]> {
  const rows = await q(c, `SELECT TABLE_SCHEMA AS s, TABLE_NAME AS t, ENGINE AS e FROM information_schema.TABLES
    WHERE TABLE_TYPE = 'BASE TABLE' AND ENGINE IS NOT NULL AND ENGINE <> 'InnoDB'
      AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')
    ORDER BY TABLE_SCHEMA, TABLE_NAME`);
  return rows.map((r) => `${String(r.s)}.${String(r.t)} (${String(r.e)})`);
}
