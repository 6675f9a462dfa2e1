import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { alive, api, startLab, until, type RunningLab } from '../helpers/lab.js';
import { ask, echoBackend } from '../helpers/tcp.js';
import { serversUnder } from '../helpers/db-servers.js';
import mysql from 'mysql2/promise';

async function dbConnect(call: ReturnType<typeof api>, id: number): Promise<mysql.Connection> {
  const db = (await call('GET', `/v4/databases/mysql/instances/${id}`)).body;
  const creds = (await call('GET', `/v4/databases/mysql/instances/${id}/credentials`)).body;
  const ca = Buffer.from((await call('GET', `/v4/databases/mysql/instances/${id}/ssl`)).body.ca_certificate, 'base64').toString();
  return mysql.createConnection({ host: db.hosts.primary, port: db.port, user: creds.username, password: creds.password, ssl: { ca }, connectTimeout: 3000 });
}

// Issue 2: Ctrl-C stops everything cleanly; a second start reuses the state.
// Fixed ports below the kernel's ephemeral range (32768-60999): the second start binds the same
// API, gRPC and bootstrap ports again, and a random port from the first start could meanwhile be
// the local end of another test's connection (EADDRINUSE, seen once in CI).
const API_PORT = 24610;

describe('fulcrum lab: stop and start again', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'fulcrum-lab-restart-'));
  let lab: RunningLab | undefined;
  const backend = echoBackend('127.0.6.1', 'solo');

  afterAll(async () => {
    await lab?.stop();
    await (await backend).close();
  });

  it('stops every child on Ctrl-C and comes back with the same state and token', async () => {
    const b = await backend;
    lab = await startLab({ stateDir, apiPort: API_PORT });
    const first = lab.info;
    const call = api(first.apiUrl, first.adminToken);
    const created = await call('POST', '/v4/nodebalancers', {
      region: 'us-east', label: 'survivor',
      configs: [{ port: 7100, protocol: 'tcp', nodes: [{ label: 'solo', address: `127.0.6.1:${b.port}` }] }],
    });
    expect(created.status).toBe(200);
    await until('traffic', () => ask(created.body.ipv4, 7100, 'a').then((s) => s === 'solo:a'));

    const engine = (await call('GET', '/v4/databases/engines')).body.data[0].id;
    const db = await call('POST', '/v4/databases/mysql/instances', { label: 'lab-db', region: 'us-east', type: 'g6-nanode-1', engine, allow_list: ['0.0.0.0/0'] });
    expect(db.status).toBe(200);
    await until('database active', async () => (await call('GET', `/v4/databases/mysql/instances/${db.body.id}`)).body.status === 'active', 60_000, 200);
    const conn = await until('first connection', () => dbConnect(call, db.body.id), 20_000, 200);
    await conn.query('CREATE DATABASE keep');
    await conn.query('CREATE TABLE keep.t (v INT)');
    await conn.query('INSERT INTO keep.t VALUES (42)');
    await conn.end();
    // One server: mariadbd itself, not the client tools the agent runs beside it (the binlog
    // archive's first base backup starts right after the database is created).
    expect(serversUnder(stateDir).length).toBe(1);

    await lab.stop();
    expect(serversUnder(stateDir)).toEqual([]);
    expect(lab.proc.exitCode).toBe(0);
    for (const pid of [first.pids.controlPlane, first.pids.dataplane, first.pids.agent]) {
      await until(`pid ${pid} gone`, () => !alive(pid), 10_000);
    }
    // Nothing listens there any more (refused at once), not merely slow to answer.
    await expect(ask(created.body.ipv4, 7100, 'b', { timeoutMs: 500 })).rejects.toThrow(/ECONNREFUSED/);

    lab = await startLab({ stateDir, apiPort: API_PORT });
    expect(lab.info.adminToken).toBe(first.adminToken);
    const again = await api(lab.info.apiUrl, lab.info.adminToken)('GET', `/v4/nodebalancers/${created.body.id}`);
    expect(again.body).toMatchObject({ id: created.body.id, ipv4: created.body.ipv4, label: 'survivor' });
    await until('traffic after restart', () => ask(created.body.ipv4, 7100, 'c').then((s) => s === 'solo:c'));
    const call2 = api(lab.info.apiUrl, lab.info.adminToken);
    const conn2 = await until('database back after restart', () => dbConnect(call2, db.body.id), 60_000, 200);
    const [rows] = await conn2.query('SELECT v FROM keep.t');
    expect(rows).toEqual([{ v: 42 }]);
    await conn2.end();
    await call2('DELETE', `/v4/databases/mysql/instances/${db.body.id}`);
    await until('database removed', () => serversUnder(stateDir).length === 0, 30_000);
  });
});
