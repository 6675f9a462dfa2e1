/**
 * The ContainerRuntime contract, as tests every adapter must pass (DESIGN §6, style L5).
 * Usage from an adapter's test file:
 *
 *   runtimeContract('process', async () => ({ runtime, engine, root, cleanup }));
 *
 * `engine` is the catalogue entry to run, `root` a scratch directory for data dirs.
 * The suite runs real servers; every node it creates is removed in afterAll.
 */
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import mysql from 'mysql2/promise';
import {
  LABEL_AGENT,
  LABEL_DATABASE,
  LABEL_MANAGED,
  LABEL_NODE,
  type ContainerRuntime,
  type NodeSpec,
} from '../../../agent/runtime/container-runtime.js';
import { freePort } from '../../helpers/tcp.js';
export { freePort };

export interface RuntimeFixture {
  runtime: ContainerRuntime;
  engine: NodeSpec['engine'];
  root: string;
  /** Builds a second runtime instance over the same state, as a restarted agent would. */
  reopen: () => Promise<ContainerRuntime>;
  cleanup?: () => Promise<void>;
}


async function query(runtime: ContainerRuntime, name: string, sql: string): Promise<any[]> {
  const c = await runtime.connection(name);
  const conn = await mysql.createConnection({ socketPath: c.socketPath, user: 'root', password: '' });
  try {
    const [rows] = await conn.query(sql);
    return rows as any[];
  } finally {
    await conn.end();
  }
}

export function runtimeContract(adapter: string, makeFixture: () => Promise<RuntimeFixture>): void {
  describe(`ContainerRuntime contract: ${adapter}`, () => {
    let fx: RuntimeFixture;
    let spec: NodeSpec;
    const agentId = `contract-${process.pid}-${Date.now() % 100000}`;
    const name = `fulcrum-ct${Date.now() % 100000}-n1`;

    beforeAll(async () => {
      fx = await makeFixture();
      mkdirSync(fx.root, { recursive: true });
      spec = {
        name,
        labels: { [LABEL_MANAGED]: 'true', [LABEL_AGENT]: agentId, [LABEL_DATABASE]: '990', [LABEL_NODE]: '1' },
        engine: fx.engine,
        dataDir: join(fx.root, name, 'data'),
        config: '[mysqld]\nserver_id=7\nskip_name_resolve=ON\ninnodb_buffer_pool_size=32M\n',
        files: { 'note.txt': 'data dir is {{DATA_DIR}}\n' },
        host: '127.0.0.1',
        port: await freePort(),
        memoryMb: 512,
        cpus: 1,
      };
    });

    afterAll(async () => {
      if (!fx) return;
      await fx.runtime.remove(name, { withData: true }).catch(() => undefined);
      await fx.runtime.close();
      await fx.cleanup?.();
    });

    it('inspect of an unknown node says missing', async () => {
      expect((await fx.runtime.inspect('fulcrum-nothing-n9')).state).toBe('missing');
    });

    it('ensure initialises an empty data dir and starts a server reachable on socket and TCP', async () => {
      const st = await fx.runtime.ensure(spec);
      expect(st.state).toBe('running');
      expect(st.labels[LABEL_DATABASE]).toBe('990');
      const rows = await query(fx.runtime, name, 'SELECT @@server_id AS id, @@port AS port');
      expect(rows[0].id).toBe(7);
      expect(rows[0].port).toBe(spec.port);
      const c = await fx.runtime.connection(name);
      expect(c.host).toBe(spec.host);
      // The TCP listener exists (root@localhost is socket-only, so an access error proves it).
      const err = await mysql
        .createConnection({ host: c.host, port: c.port, user: 'nobody', password: 'x' })
        .then(() => null, (e: Error) => e);
      expect(String(err)).toMatch(/Access denied/);
    });

    it('ensure with an equal spec is a no-op (same process or container)', async () => {
      const before = await fx.runtime.inspect(name);
      const again = await fx.runtime.ensure(spec);
      expect(again.ref).toBe(before.ref);
      expect((await fx.runtime.list({ [LABEL_AGENT]: agentId })).length).toBe(1);
    });

    it('list finds the node by labels, also from a fresh runtime instance (agent restart)', async () => {
      await query(fx.runtime, name, 'CREATE DATABASE IF NOT EXISTS contract');
      const reopened = await fx.reopen();
      const found = await reopened.list({ [LABEL_AGENT]: agentId, [LABEL_DATABASE]: '990' });
      expect(found.map((n) => n.name)).toEqual([name]);
      expect(found[0]!.state).toBe('running');
      expect(found[0]!.spec?.port).toBe(spec.port);
      expect(await reopened.list({ [LABEL_AGENT]: 'someone-else' })).toEqual([]);
      await reopened.close();
    });

    it('stop keeps data; start brings it back', async () => {
      await query(fx.runtime, name, 'CREATE TABLE IF NOT EXISTS contract.t (v INT)');
      await query(fx.runtime, name, 'INSERT INTO contract.t VALUES (42)');
      await fx.runtime.stop(name);
      expect((await fx.runtime.inspect(name)).state).toBe('stopped');
      await fx.runtime.start(name);
      expect((await fx.runtime.inspect(name)).state).toBe('running');
      const rows = await query(fx.runtime, name, 'SELECT v FROM contract.t');
      expect(rows.map((r) => r.v)).toContain(42);
    });

    it('kill crashes the node; ensure restarts it with its data', async () => {
      await fx.runtime.kill(name);
      expect((await fx.runtime.inspect(name)).state).toBe('stopped');
      await fx.runtime.ensure(spec);
      const rows = await query(fx.runtime, name, 'SELECT v FROM contract.t');
      expect(rows.map((r) => r.v)).toContain(42);
    });

    it('ensure with a changed spec restarts the node with the new config', async () => {
      const before = await fx.runtime.inspect(name);
      spec = { ...spec, config: spec.config.replace('server_id=7', 'server_id=8') };
      const st = await fx.runtime.ensure(spec);
      expect(st.ref).not.toBe(before.ref);
      const rows = await query(fx.runtime, name, 'SELECT @@server_id AS id');
      expect(rows[0].id).toBe(8);
    });

    it('exec runs the engine client tools against the node', async () => {
      const res = await fx.runtime.exec(name, ['mariadb-dump', '--user=root', '--no-create-info', '--skip-extended-insert', 'contract', 't']);
      expect(res.exitCode).toBe(0);
      expect(res.stdout).toMatch(/INSERT INTO `t` VALUES \(42\)/);
    });

    it('exec pipes stdin, passes env and streams stdout into a stream it ends', async () => {
      const { PassThrough, Readable } = await import('node:stream');
      const sink = new PassThrough();
      let streamed = '';
      sink.on('data', (d: Buffer) => (streamed += d.toString()));
      const ended = new Promise<void>((r) => sink.once('end', () => r()));
      const res = await fx.runtime.exec(name, ['mariadb', '--user=root', '--batch', '--skip-column-names'], {
        stdin: Readable.from(['SELECT 6 * 7;\n', 'SELECT v FROM contract.t;\n']),
        stdout: sink,
      });
      await ended;
      expect(res.exitCode).toBe(0);
      expect(res.stdout).toBe('');
      expect(streamed.split('\n').filter(Boolean)).toEqual(['42', '42']);
      // A wrong password in MYSQL_PWD reaches the client: root has none, so it is refused.
      const denied = await fx.runtime.exec(name, ['mariadb', '--user=root', '-e', 'SELECT 1'], { env: { MYSQL_PWD: 'wrong' } });
      expect(denied.exitCode).not.toBe(0);
      expect(denied.stderr).toMatch(/Access denied/);
    });

    it("exec writes stdout into an open file (stdoutFd) from the file's offset, and leaves it open", async () => {
      const dir = mkdtempSync(join(tmpdir(), 'fulcrum-contract-out-'));
      const fd = openSync(join(dir, 'out'), 'w+', 0o600);
      try {
        writeSync(fd, 'before\n');
        const res = await fx.runtime.exec(name, ['mariadb', '--user=root', '--batch', '--skip-column-names', '-e', 'SELECT 6 * 7'], { stdoutFd: fd });
        expect(res.exitCode).toBe(0);
        expect(res.stdout).toBe('');
        writeSync(fd, 'after\n');
        expect(readFileSync(join(dir, 'out'), 'utf8')).toBe('before\n42\nafter\n');
      } finally {
        closeSync(fd);
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it('exec stops the program when the caller destroys the output stream', async () => {
      const { PassThrough } = await import('node:stream');
      const sink = new PassThrough();
      let outputSeen = false;
      sink.once('data', () => {
        outputSeen = true;
        sink.destroy();
      });
      const t0 = Date.now();
      // About 100 MB of output: far more than any pipe buffer.
      const res = await fx.runtime.exec(name, ['mariadb', '--user=root', '--batch', '-e', "SELECT REPEAT('x', 1000000) FROM contract.seq_1_to_100"], { stdout: sink });
      // The query ran and printed (a failing query would pass the checks below by itself).
      expect(outputSeen).toBe(true);
      expect(res.exitCode).not.toBe(0);
      expect(Date.now() - t0).toBeLessThan(15_000);
    });

    it('exec whose output stream fails (a full disk) fails naming it, and leaves no uncaught error', async () => {
      const { Writable } = await import('node:stream');
      // No 'error' listener of the test's own, as with a caller's bare file stream: the runtime's
      // listener is all there is, and without it the error ends the process.
      const sink = new Writable({ write: (_c, _e, cb) => cb(Object.assign(new Error('no space left on device'), { code: 'ENOSPC' })) });
      const t0 = Date.now();
      const res = await fx.runtime.exec(name, ['mariadb', '--user=root', '--batch', '-e', "SELECT REPEAT('x', 1000000) FROM contract.seq_1_to_100"], { stdout: sink });
      expect(res.exitCode).not.toBe(0);
      expect(res.stderr, res.stderr.slice(-300)).toContain('output failed: no space left on device');
      expect(Date.now() - t0).toBeLessThan(15_000);
    });

    it('exec into a file that cannot be written (stdoutFd on /dev/full) fails', async () => {
      const fd = openSync('/dev/full', 'w');
      try {
        const res = await fx.runtime.exec(name, ['mariadb-dump', '--user=root', 'contract', 't'], { stdoutFd: fd });
        expect(res.exitCode).not.toBe(0);
      } finally {
        closeSync(fd);
      }
    });

    it('exec stops the program when its signal is aborted (a delete cancelling a backup)', async () => {
      const ac = new AbortController();
      const t0 = Date.now();
      const running = fx.runtime.exec(name, ['mariadb', '--user=root', '-e', 'SELECT SLEEP(120)'], { signal: ac.signal });
      setTimeout(() => ac.abort(new Error('cancelled by the test')), 500);
      const res = await running;
      expect(res.exitCode).not.toBe(0);
      expect(Date.now() - t0).toBeLessThan(15_000);
      // Aborted before it starts: it never starts.
      await expect(fx.runtime.exec(name, ['mariadb', '--user=root', '-e', 'SELECT 1'], { signal: ac.signal })).rejects.toThrow(/cancelled by the test/);
    });

    it('logs returns the server error log', async () => {
      expect(await fx.runtime.logs(name, 200)).toMatch(/ready for connections/);
    });

    it('remove with data leaves nothing: no node, no listener, no data dir', async () => {
      await fx.runtime.remove(name, { withData: true });
      expect((await fx.runtime.inspect(name)).state).toBe('missing');
      expect(await fx.runtime.list({ [LABEL_AGENT]: agentId })).toEqual([]);
      expect(existsSync(spec.dataDir)).toBe(false);
      const err = await mysql.createConnection({ host: spec.host, port: spec.port, user: 'x' }).then(() => null, (e: Error) => e);
      expect(String(err)).toMatch(/ECONNREFUSED/);
      const left = existsSync(join(fx.root, name)) ? readdirSync(join(fx.root, name)) : [];
      expect(left).toEqual([]);
      await fx.runtime.remove(name, { withData: true });
    });
  });
}
