import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api, startLab, until, type RunningLab } from '../../helpers/lab.js';
import { serversUnder } from '../../helpers/db-servers.js';
import { DEFAULT_SERIES, engineOfSeries, seriesPattern } from '../../helpers/engines.js';
import { connectFrom } from './db-lab.js';

/** The one-command lab serves Managed MySQL: create, connect over verified TLS, delete. */
describe('fulcrum lab: a database end to end', () => {
  let lab: RunningLab;
  let call: ReturnType<typeof api>;
  let passed = false;
  beforeAll(async () => {
    lab = await startLab();
    call = api(lab.info.apiUrl, lab.info.adminToken);
  });
  afterAll(async () => {
    await lab?.stop();
    // A failed run keeps its state folder (logs/) for diagnosis.
    if (lab && passed) rmSync(lab.info.stateDir, { recursive: true, force: true });
    else if (lab) console.log(`lab state kept in ${lab.info.stateDir}`);
  });

  it('creates, serves and deletes a database', async () => {
    const engines = (await call('GET', '/v4/databases/engines')).body.data;
    expect(engines.length).toBeGreaterThan(0);
    const created = await call('POST', '/v4beta/databases/mysql/instances', {
      label: 'lab-db', region: 'us-east', type: 'g6-nanode-1', engine: engineOfSeries(engines, DEFAULT_SERIES), allow_list: ['127.0.0.0/8'],
    });
    expect(created.status).toBe(200);
    const id = created.body.id;
    const db = await until('active', async () => {
      const r = (await call('GET', `/v4/databases/mysql/instances/${id}`)).body;
      return r.status === 'active' ? r : undefined;
    }, 60_000, 100);
    const { password } = (await call('GET', `/v4/databases/mysql/instances/${id}/credentials`)).body;
    const ca = Buffer.from((await call('GET', `/v4/databases/mysql/instances/${id}/ssl`)).body.ca_certificate, 'base64').toString();
    const c = await connectFrom({ source: '127.0.0.9', host: db.hosts.primary, port: db.port, user: 'linroot', password, ca });
    const [rows] = await c.query('SELECT VERSION() AS v');
    expect((rows as any[])[0].v).toContain(db.version);
    expect(db.version).toMatch(seriesPattern(DEFAULT_SERIES));
    await c.end();
    expect((await call('DELETE', `/v4/databases/mysql/instances/${id}`)).body).toEqual({});
    await until('nodes gone', () => serversUnder(lab.info.stateDir).length === 0 || undefined, 30_000, 200);
    passed = true;
  });
});
