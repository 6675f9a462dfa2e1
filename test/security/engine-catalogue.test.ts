/**
 * Attack (docs/security/secrets.md, "Engines"): any host that reaches the gRPC port speaks the
 * agent protocol and reports an engine whose image is `evil/image` and whose binary is a program
 * of its choosing. Before the fix the control plane ranked agent-reported engines ahead of its
 * own, wrote that binary into every new database (and retargeted existing ones), and the real
 * agent ran whatever path it was given if the file existed. Now the catalogue is the operator's:
 * agents add engine ids only, never an image or binary; and an agent refuses to run any binary
 * or image its own catalogue does not list, reporting the error instead.
 *
 * The fake agent holds a real agent certificate of its own (a host that joined, then turned
 * hostile) and speaks through createControlStream, as a real agent does.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../control-plane/main.js';
import { startAgent, type RunningAgent } from '../../agent/main.js';
import { createControlStream, type ControlStream } from '../../agent/control-stream.js';
import { detectLocalCatalogue, type CatalogueEntry } from '../../agent/catalogue.js';
import { createProcessRuntime } from '../../agent/runtime/process-runtime.js';
import { systemClock } from '../../lib/clock.js';
import { silentLogger } from '../../lib/logger.js';
import { enrolHost, hostCredentials } from '../helpers/fleet.js';
import { api, until } from '../helpers/lab.js';
import { createAgentFixture, type AgentFixture } from '../integration/agent/agent-fixture.js';
import { desiredDb, testNet } from '../integration/agent/control-plane-driver.js';

const MYSQL = '/v4/databases/mysql/instances';

/** A "server binary" that leaves a mark when it runs: proof that the agent executed it. */
function evilProgram(dir: string): { path: string; marker: string } {
  const path = join(dir, 'evil-mariadbd');
  const marker = join(dir, 'evil-ran');
  writeFileSync(path, `#!/bin/sh\necho ran >> '${marker}'\nexit 1\n`, { mode: 0o755 });
  return { path, marker };
}

describe('security: agents cannot choose the software other hosts run', () => {
  const root = mkdtempSync(join(tmpdir(), 'fulcrum-engine-catalogue-'));
  const evil = evilProgram(root);
  const octet = 100 + Math.floor(Math.random() * 150);
  let engine: CatalogueEntry;
  let cp: ControlPlane;
  let fake: ControlStream | undefined;
  let agent: RunningAgent | undefined;
  let call: ReturnType<typeof api>;
  const agentDir = join(root, 'agent');

  beforeAll(async () => {
    [engine] = (await detectLocalCatalogue()) as [CatalogueEntry];
    cp = await startControlPlane({
      stateDir: join(root, 'cp'), apiPort: 0, grpcPort: 0, logger: silentLogger(),
      databasePool: `127.78.${octet}.0/24`, nodebalancerPool: `127.77.${octet}.0/24`,
    });
    call = api(cp.apiUrl, cp.adminToken);
    // The attacker: a gRPC client speaking the agent protocol, in another region so that no
    // database is placed on it; it only advertises engines.
    const evilCredentials = await hostCredentials(cp, 'agent', 'evil-agent', 'lab-local');
    fake = createControlStream({
      security: { credentials: () => evilCredentials, generation: 1 },
      target: cp.grpcAddress, agentId: 'evil-agent', region: 'lab-local', logger: silentLogger(), clock: systemClock, heartbeatMs: 300,
      observe: () => ({
        runtime: 'process', appliedVersion: 0, databases: [], operationResults: [],
        engines: [
          { id: engine.id, engine: 'mysql', version: engine.version, image: 'evil/image', binary: evil.path },
          { id: 'mysql/0.0.1', engine: 'mysql', version: '0.0.1', image: 'evil/image', binary: evil.path },
        ],
      }),
      onDesired: () => {},
    });
    await until('fake agent listed with its engines', async () =>
      (await call('GET', '/v4/fulcrum/agents')).body.data.some((a: any) => a.id === 'evil-agent' && a.engines.length === 2), 20_000, 100);
    await enrolHost(cp, agentDir, 'agent', 'real-agent', 'us-east');
    agent = await startAgent({
      id: 'real-agent', region: 'us-east', controlPlane: cp.grpcAddress, stateDir: agentDir, runtime: 'process',
      nodeAddressPool: `127.79.${octet}.0/24`, heartbeatMs: 300, reconcileIntervalMs: 300, logger: silentLogger(),
    });
  });

  afterAll(async () => {
    await fake?.close();
    await agent?.close();
    const rt = createProcessRuntime({ root: join(agentDir, 'runtime'), logger: silentLogger() });
    for (const n of await rt.list({})) await rt.remove(n.name, { withData: true });
    await rt.close();
    await cp?.close();
    rmSync(root, { recursive: true, force: true });
  });

  it('the engines list and the desired state sent to the real agent never carry the reported image or binary', async () => {
    const engines = await call('GET', '/v4/databases/engines');
    expect(engines.status).toBe(200);
    expect(engines.body.data.map((e: any) => e.id)).toContain(engine.id);
    expect(JSON.stringify(engines.body)).not.toMatch(/evil/);

    const created = await call('POST', MYSQL, { label: 'victim-db', region: 'us-east', type: 'g6-nanode-1', engine: engine.id, allow_list: [] });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    const id = created.body.id;
    const desiredNow = () => readFileSync(join(agentDir, 'desired.json'), 'utf8');
    await until('desired state on the real agent', () => desiredNow().includes(`"id":${id}`), 20_000, 100);
    expect(desiredNow()).not.toContain(evil.path);
    await until('database active', async () => {
      const s = (await call('GET', `${MYSQL}/${id}`)).body.status;
      if (s === 'failed') throw new Error('database failed');
      return s === 'active';
    }, 90_000, 200);
    // Past a retargeting round (every 2 s) the desired state still names no reported engine.
    await new Promise((r) => setTimeout(r, 3000));
    const desired = desiredNow();
    expect(desired).not.toContain('evil/image');
    expect(desired).not.toContain(evil.path);
    expect(existsSync(evil.marker)).toBe(false);
    const row = cp.context.db!.prepare('SELECT image, binary FROM databases WHERE id = ?').get(id) as { image: string; binary: string };
    expect(row.image).not.toBe('evil/image');
    expect(row.binary).not.toBe(evil.path);
  });
});

describe('security: an agent runs only its own catalogue', () => {
  let fx: AgentFixture;
  const root = mkdtempSync(join(tmpdir(), 'fulcrum-engine-refuse-'));
  const evil = evilProgram(root);

  beforeAll(async () => {
    fx = await createAgentFixture({ id: 'agent-engine-refuse', slot: 39, reconcileIntervalMs: 300 });
    await fx.startAgent();
  });
  afterAll(async () => {
    await fx?.close();
    rmSync(root, { recursive: true, force: true });
  });

  it('a desired database naming a binary or image outside the catalogue is refused with an error, and nothing runs', async () => {
    const [engine] = (await detectLocalCatalogue()) as [CatalogueEntry];
    const net = testNet('127.78', 39);
    fx.driver.setDatabases([
      desiredDb({ id: 41, engineId: engine.id, version: engine.version, binary: evil.path, hostPrimary: `${net}.1`, hostSecondary: `${net}.2` }),
      desiredDb({ id: 42, engineId: engine.id, version: engine.version, image: 'evil/image', binary: '', hostPrimary: `${net}.3`, hostSecondary: `${net}.4` }),
    ]);
    await fx.driver.waitFor(() => /binary .*evil-mariadbd is not in this agent's catalogue/.test(fx.driver.db(41)?.error ?? ''), 20_000, 'binary refused');
    // The process runtime runs binaries; an image alone resolves to the agent's own binary.
    await fx.driver.waitFor(() => fx.driver.db(42)?.status === 'active', 60_000, 'image-only database on the local binary');
    expect(existsSync(evil.marker)).toBe(false);
    const nodes = await fx.agent!.runtime.list({ 'fulcrum.database': '41' });
    expect(nodes).toEqual([]);
    const running = await fx.agent!.runtime.list({ 'fulcrum.database': '42' });
    expect(running.every((n) => n.spec?.engine.binary === engine.binary)).toBe(true);
  });
});
