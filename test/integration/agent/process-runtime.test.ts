// integration-lane: concurrent (the process runtime in temp roots: servers on 127.0.0.1 and a free port, listed and stopped by their own root and data directories).
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import mysql from 'mysql2/promise';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '../../../lib/logger.js';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { describe, expect, it } from 'vitest';
import { freePort, runtimeContract } from './runtime-contract.js';
import { serversUnder } from '../../helpers/db-servers.js';

runtimeContract('process', async () => {
  const root = mkdtempSync(join(tmpdir(), 'fulcrum-prt-'));
  const [engine] = await detectLocalCatalogue();
  if (!engine) throw new Error('no local mariadbd found: the process runtime needs mariadb-server installed');
  const make = () => createProcessRuntime({ root: join(root, 'runtime'), logger: silentLogger() });
  return {
    runtime: make(),
    engine,
    root: join(root, 'data'),
    reopen: async () => make(),
    cleanup: async () => rmSync(root, { recursive: true, force: true }),
  };
});

describe('process runtime specifics', () => {
  it('a server that cannot start is reported with the reason and left stopped', async () => {
    const root = mkdtempSync(join(tmpdir(), 'fulcrum-prt-bad-'));
    const rt = createProcessRuntime({ root: join(root, 'runtime'), logger: silentLogger() });
    const [engine] = await detectLocalCatalogue();
    const base = {
      labels: {}, dataDir: join(root, 'data'), files: {}, host: '127.0.0.1', memoryMb: 256, cpus: 1,
    };
    try {
      const missing = rt.ensure({ ...base, name: 'fulcrum-bad-n1', engine: { id: 'mysql/0', version: '0', binary: join(root, 'no-such-mariadbd') }, config: '[mysqld]\n', port: await freePort() });
      await expect(missing).rejects.toThrow(/fulcrum-bad-n1 did not start: [\s\S]*(ENOENT|no-such)/);
      const badConfig = rt.ensure({ ...base, name: 'fulcrum-bad-n2', engine: engine!, config: '[mysqld]\nno_such_option=1\n', port: await freePort() });
      await expect(badConfig).rejects.toThrow(/fulcrum-bad-n2 did not start: [\s\S]*no_such_option/);
      expect((await rt.inspect('fulcrum-bad-n2')).state).toBe('stopped');
    } finally {
      for (const n of await rt.list({})) await rt.remove(n.name, { withData: true });
      rmSync(root, { recursive: true, force: true });
    }
  });

  it('gives each server its own tmpdir, so starting one never deletes another\'s temporary tables', async () => {
    // A MariaDB server deletes every #sql* file in its tmpdir at start; this one stands for a
    // temporary table of another server that shares /tmp.
    const probe = join(tmpdir(), `#sql-fulcrum-probe-${process.pid}`);
    writeFileSync(probe, '');
    const root = mkdtempSync(join(tmpdir(), 'fulcrum-prt-tmp-'));
    const rt = createProcessRuntime({ root: join(root, 'runtime'), logger: silentLogger() });
    const [engine] = await detectLocalCatalogue();
    try {
      const st = await rt.ensure({
        name: 'fulcrum-tmpdir-n1', labels: {}, dataDir: join(root, 'data'), files: {}, host: '127.0.0.1', memoryMb: 256, cpus: 1,
        engine: engine!, config: '[mysqld]\ninnodb_buffer_pool_size=32M\n', port: await freePort(),
      });
      expect(st.state).toBe('running');
      const c = await mysql.createConnection({ socketPath: (await rt.connection('fulcrum-tmpdir-n1')).socketPath, user: 'root', password: '' });
      const [rows] = await c.query('SELECT @@tmpdir AS t');
      await c.end();
      const dir = (rows as { t: string }[])[0]!.t;
      expect(dir.startsWith(join(root, 'runtime'))).toBe(true);
      expect(existsSync(probe)).toBe(true);
    } finally {
      for (const n of await rt.list({})) await rt.remove(n.name, { withData: true });
      rmSync(root, { recursive: true, force: true });
      rmSync(probe, { force: true });
    }
  });

  it('never runs two servers on one data directory: a server its node.json no longer names is stopped before a new one starts', async () => {
    const root = mkdtempSync(join(tmpdir(), 'fulcrum-prt-stray-'));
    const rt = createProcessRuntime({ root: join(root, 'runtime'), logger: silentLogger() });
    const [engine] = await detectLocalCatalogue();
    const dataDir = join(root, 'data');
    try {
      const first = await rt.ensure({
        name: 'fulcrum-stray-n1', labels: {}, dataDir, files: {}, host: '127.0.0.1', memoryMb: 256, cpus: 1,
        engine: engine!, config: '[mysqld]\ninnodb_buffer_pool_size=32M\n', port: await freePort(),
      });
      const old = Number(first.ref);
      expect(serversUnder(dataDir)).toEqual([old]);
      // The record of the running server is lost (an agent stopped between spawning a server and
      // recording its pid): the runtime sees the node stopped and starts it.
      const file = join(root, 'runtime', 'nodes', 'fulcrum-stray-n1', 'node.json');
      const meta = JSON.parse(readFileSync(file, 'utf8')) as { pid?: number };
      delete meta.pid;
      writeFileSync(file, JSON.stringify(meta), { mode: 0o600 });
      expect((await rt.inspect('fulcrum-stray-n1')).state).toBe('stopped');
      await rt.start('fulcrum-stray-n1');
      const now = await rt.inspect('fulcrum-stray-n1');
      expect(now.state).toBe('running');
      expect(Number(now.ref)).not.toBe(old);
      expect(serversUnder(dataDir)).toEqual([Number(now.ref)]);
      const c = await mysql.createConnection({ socketPath: (await rt.connection('fulcrum-stray-n1')).socketPath, user: 'root', password: '' });
      const [rows] = await c.query('SELECT CONNECTION_ID() AS id');
      await c.end();
      expect((rows as { id: number }[]).length).toBe(1);
    } finally {
      for (const n of await rt.list({})) await rt.remove(n.name, { withData: true });
      rmSync(root, { recursive: true, force: true });
    }
  }, 120_000);
});
