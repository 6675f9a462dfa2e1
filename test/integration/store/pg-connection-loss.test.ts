import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { migratePostgres, openPostgresStore } from '../../../control-plane/store/postgres/store.js';
import { pgReplicas } from '../../../control-plane/store/postgres/replicas.js';
import type { Change } from '../../../control-plane/store/replicas.js';
import type { Store } from '../../../control-plane/domain/store.js';
import type { PgExecutor } from '../../../control-plane/store/postgres/executor.js';
import { systemClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import { waitFor } from '../../helpers/backends.js';
import { startPgCluster, type PgCluster } from '../../helpers/postgres.js';

/**
 * A PostgreSQL session the control plane holds (a transaction's, the migration's, a replica's
 * LISTEN and lease sessions) ends under it: `pg_terminate_backend` from another connection, as an
 * admin, a failover or a restart of the server does. The process must not crash on pg's 'error'
 * event, the work on that session fails with a clear error, and the store goes on working
 * (docs/architecture.md, "The store").
 */
describe('a PostgreSQL session lost under the store', () => {
  let cluster: PgCluster | undefined;
  let dir = '';
  let url = '';
  let store: (Store & { executor: PgExecutor }) | undefined;
  let admin: pg.Client | undefined;
  const uncaught: unknown[] = [];
  const record = (err: unknown) => void uncaught.push(err);

  beforeAll(async () => {
    process.on('uncaughtException', record);
    process.on('unhandledRejection', record);
    cluster = await startPgCluster();
    url = await cluster.newDatabase();
    dir = mkdtempSync(join(tmpdir(), 'pgloss-'));
    store = await openPostgresStore(url, { kekFile: join(dir, 'kek') });
    admin = new pg.Client({ connectionString: url });
    await admin.connect();
  }, 180_000);

  afterAll(async () => {
    await admin?.end().catch(() => undefined);
    await store?.close();
    await cluster?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
    process.off('uncaughtException', record);
    process.off('unhandledRejection', record);
  });

  // Each test answers for what it caused only.
  beforeEach(() => {
    uncaught.length = 0;
  });
  afterEach(() => {
    // Whatever pg emitted has had time to land: it is emitted in the same tick as the failure.
    expect(uncaught).toEqual([]);
  });

  const terminate = async (pid: number) => {
    const r = await admin!.query('SELECT pg_terminate_backend($1) AS ok', [pid]);
    expect(r.rows[0].ok).toBe(true);
    await waitFor(async () => (await admin!.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [pid])).rowCount === 0, 20_000, `backend ${pid} gone`);
  };
  const backendPid = async () => Number((await store!.executor.one('SELECT pg_backend_pid() AS pid'))!.pid);

  it('a transaction whose backend is terminated while it waits fails clearly, the process lives, the next call works', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let pid = 0;
    const tx = store!.kv.atomically!(async () => {
      await store!.kv.set('pg-loss-a', 'written in the lost transaction');
      pid = await backendPid();
      await gate;
      await store!.kv.set('pg-loss-a', 'after the loss');
    });
    tx.catch(() => undefined);
    await waitFor(() => pid > 0, 20_000, 'transaction started');
    // Idle in the transaction: no query is pending, so pg can only tell anyone by 'error'.
    await terminate(pid);
    // Give pg's socket handlers time to run (and, without the fix, to throw) before fn goes on.
    await new Promise((r) => setTimeout(r, 200));
    release();
    await expect(tx).rejects.toThrow(/PostgreSQL connection was lost during the transaction; nothing of it was committed/);
    expect(uncaught).toEqual([]);
    expect(await store!.kv.get('pg-loss-a')).toBeUndefined();
    await store!.kv.atomically!(() => store!.kv.set('pg-loss-a', 'next'));
    expect(await store!.kv.get('pg-loss-a')).toBe('next');
  }, 60_000);

  it('a transaction whose backend is terminated in the middle of a query fails clearly and the store goes on', async () => {
    let pid = 0;
    const tx = store!.executor.transaction(async () => {
      pid = await backendPid();
      await store!.executor.query('SELECT pg_sleep(30)');
    });
    tx.catch(() => undefined);
    await waitFor(async () => pid > 0 && (await admin!.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND query LIKE '%pg_sleep%' AND state = 'active'", [pid])).rowCount === 1, 20_000, 'query running');
    await terminate(pid);
    await expect(tx).rejects.toThrow(/PostgreSQL connection was lost during the transaction/);
    expect(uncaught).toEqual([]);
    await store!.kv.set('pg-loss-b', 'ok');
    expect(await store!.kv.get('pg-loss-b')).toBe('ok');
  }, 60_000);

  it('a migration whose backend is terminated fails the migration, not the process', async () => {
    let done = false;
    const run = migratePostgres(store!.executor, [{ id: '9999-pg-loss', sql: 'SELECT pg_sleep(30)' }]).finally(() => (done = true));
    run.catch(() => undefined);
    const row = await waitFor(async () => (await admin!.query("SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' AND state = 'active'")).rows[0], 20_000, 'migration running');
    await terminate(Number(row.pid));
    await expect(run).rejects.toThrow(/migration 9999-pg-loss failed/);
    expect(done).toBe(true);
    expect(uncaught).toEqual([]);
    expect(await store!.migrations()).not.toContain('9999-pg-loss');
  }, 60_000);

  it('the replicas\' LISTEN and lease sessions, terminated, come back: notifications arrive again and the lease is retaken', async () => {
    const changes: Change[] = [];
    const replicas = pgReplicas(url, { clock: systemClock, logger: silentLogger(), beats: store!.replicaBeats, tickMs: 100 });
    replicas.onChange((c) => changes.push(c));
    try {
      const listenerPid = async () => (await admin!.query("SELECT pid FROM pg_stat_activity WHERE query = 'LISTEN fulcrum_changes'")).rows[0]?.pid as number | undefined;
      const first = await waitFor(listenerPid, 20_000, 'listener session');
      await waitFor(() => replicas.leaseHeld(), 20_000, 'lease taken');
      const lease = (await admin!.query("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted")).rows.map((r) => Number(r.pid));
      expect(lease).toHaveLength(1);

      await Promise.all([terminate(first), terminate(lease[0]!)]);
      const second = await waitFor(async () => {
        const p = await listenerPid();
        return p !== undefined && p !== first ? p : undefined;
      }, 20_000, 'a new listener session');
      expect(second).not.toBe(first);
      // Delivered through the new session: another replica's write is heard again.
      await admin!.query("SELECT pg_notify('fulcrum_changes', 'nodebalancer:4242')");
      await waitFor(() => changes.some((c) => c.kind === 'nodebalancer' && c.id === 4242), 20_000, 'notification after the loss');
      await waitFor(async () => replicas.leaseHeld()
        && (await admin!.query("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted")).rows.some((r) => Number(r.pid) !== lease[0]), 20_000, 'lease retaken on a new session');
      expect(uncaught).toEqual([]);
    } finally {
      await replicas.close();
    }
  }, 60_000);
});
