import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDataplane, type Dataplane } from '../../../dataplane/main.js';
import { silentLogger } from '../../../lib/logger.js';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { waitFor } from '../../helpers/backends.js';
import { databaseRecord } from '../../helpers/database-record.js';
import { enrolHost } from '../../helpers/fleet.js';

/**
 * A data plane that cannot listen on a database's hosts.primary (here: another process holds
 * the address and port) refuses the snapshot; the database's events on GET /v4/account/events
 * say which data plane, which endpoint and why, and say it again once the data plane serves it.
 * A real control plane, a real data plane over gRPC with mTLS, a real socket in the way.
 */
describe('a database endpoint a data plane cannot listen on', () => {
  let api: ApiHarness;
  let dp: Dataplane | undefined;
  let dpState: string;
  let blocker: Server | undefined;
  const slot = 1 + Math.floor(Math.random() * 200);
  const primary = `127.94.${slot}.1`;
  const secondary = `127.94.${slot}.2`;
  let id: number;

  beforeAll(async () => {
    api = await startApi({ databasePool: `127.94.${slot}.0/24` });
    blocker = createServer();
    await new Promise<void>((resolve, reject) => {
      blocker!.once('error', reject);
      blocker!.listen({ host: primary, port: 3306, exclusive: true }, resolve);
    });
    const repo = api.cp.context.store.databases;
    const row = await repo.create(databaseRecord({ label: 'unbound', status: 'active', provisioned: true, convergedGeneration: 1, hostPrimary: primary, hostSecondary: secondary }));
    id = row.id;
    dpState = mkdtempSync(join(tmpdir(), 'fulcrum-unbound-dp-'));
    await enrolHost(api.cp, dpState, 'dataplane', 'dp-unbound', 'us-east');
    dp = await startDataplane({ id: 'dp-unbound', region: 'us-east', controlPlane: api.cp.grpcAddress, stateDir: dpState, logger: silentLogger() });
  }, 60_000);
  afterAll(async () => {
    await dp?.close();
    await api?.close();
    await new Promise((r) => (blocker?.listening ? blocker.close(r) : r(undefined)));
    if (dpState) rmSync(dpState, { recursive: true, force: true });
  });

  const events = async (): Promise<{ status: string; message: string; action: string }[]> => {
    await new Promise((r) => setTimeout(r, 300)); // the API answers 429 to a client asking every few ms
    const r = await api.req('GET', '/v4/account/events', { headers: { 'x-filter': JSON.stringify({ 'entity.id': id, 'entity.type': 'database' }) } });
    return r.body.data;
  };

  it('shows a failed event naming the data plane, the endpoint and the reason, then one when it is served', async () => {
    const failed = `Data plane dp-unbound cannot listen on hosts.primary ${primary}:3306 (EADDRINUSE): the endpoint is not served there, and that data plane keeps its previous configuration until it can.`;
    await waitFor(async () => (await events()).some((e) => e.message === failed), 60_000);
    expect((await events()).find((e) => e.message === failed)).toMatchObject({ action: 'database_update', status: 'failed' });
    // The address is freed and the database changes (a new label): the next snapshot binds it.
    await new Promise((r) => blocker!.close(r));
    expect((await api.req('PUT', `/v4/databases/mysql/instances/${id}`, { body: { label: 'unbound-2' } })).status).toBe(200);
    const served = `Data plane dp-unbound now serves hosts.primary ${primary}:3306.`;
    await waitFor(async () => (await events()).some((e) => e.message === served), 60_000);
    // Said once each, not on every snapshot.
    expect((await events()).filter((e) => e.message === failed)).toHaveLength(1);
  }, 150_000);
});
