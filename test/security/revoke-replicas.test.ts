/**
 * Attack (docs/security/grpc.md, "Revocation"): with two control-plane
 * replicas on one PostgreSQL store, an admin removes a data plane and an agent through replica A
 * while they hold their streams on replica B. Before the fix only A's streams were closed: the
 * removed hosts kept receiving TLS keys, placements and passwords from B, B kept trusting the
 * data plane's address for PROXY headers, a renewal racing the removal produced a certificate
 * every replica accepted, and join tokens made before the removal still brought the host back.
 * Real replicas (mTLS, real bootstrap endpoint), real PostgreSQL, hand-written gRPC clients.
 */
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../control-plane/main.js';
import { CERTS_PER_HOST_PER_HOUR } from '../../control-plane/domain/fleet/fleet-service.js';
import { channelOptions, grpc, loadAgentProto, loadConfigProto, mtlsCredentials } from '../../lib/grpc.js';
import { isControlPlaneCert, joinFleet, parseJoinToken, renewCertificate } from '../../lib/fleet-host.js';
import { generateKeyAndCsr, loadHostPki, type HostPki } from '../../lib/pki.js';
import { silentLogger } from '../../lib/logger.js';
import { issueHostPki } from '../helpers/fleet.js';
import { api, until } from '../helpers/lab.js';
import { startPgCluster, type PgCluster } from '../helpers/postgres.js';
import { startScriptedAgent, type ScriptedAgent } from '../integration/databases/scripted-agent.js';

/** What the removed data plane says it dials database members from. */
const DP_SOURCE = '127.93.41.77';
/** A few seconds: the notification takes milliseconds, the re-check at most 5 s. */
const CLOSE_WITHIN_MS = 8_000;

interface Held {
  /** The first message the control plane sent (a snapshot or desired state). */
  first: Promise<unknown>;
  /** The error the stream ended with, or undefined while it is open. */
  ended(): grpc.ServiceError | undefined;
  close(): void;
}

/** A stream kept open with a host's certificate (config or agent), or a telemetry report stream. */
function hold(address: string, pki: HostPki, kind: 'config' | 'agent' | 'telemetry'): Held {
  const creds = mtlsCredentials(pki, isControlPlaneCert);
  const proto = kind === 'agent' ? loadAgentProto().fulcrum.v1.AgentService : kind === 'config' ? loadConfigProto().fulcrum.v1.ConfigService : loadConfigProto().fulcrum.v1.TelemetryService;
  const client = new (proto as any)(address, creds, channelOptions);
  let error: grpc.ServiceError | undefined;
  let gotFirst!: (v: unknown) => void;
  const first = new Promise<unknown>((r) => (gotFirst = r));
  let call: any;
  if (kind === 'telemetry') {
    call = client.Report((err: grpc.ServiceError | null) => {
      error = err ?? ({ code: grpc.status.OK, details: 'answered' } as grpc.ServiceError);
    });
    gotFirst(undefined);
  } else {
    call = client.Stream();
    call.on('data', (m: unknown) => gotFirst(m));
    call.on('error', (e: grpc.ServiceError) => (error = e));
    call.write(kind === 'config'
      ? { dataplaneId: '', region: '', versionApplied: 0, responseNonce: '', endpointSource: DP_SOURCE }
      : { agentId: '', region: '', hello: true });
  }
  return {
    first,
    ended: () => error,
    close: () => {
      call.cancel?.();
      client.close();
    },
  };
}

/** Opens a stream with `pki` and answers whether the control plane served it or refused it. */
async function served(address: string, pki: HostPki, kind: 'config' | 'agent'): Promise<string> {
  const h = hold(address, pki, kind);
  let first = false;
  void h.first.then(() => (first = true));
  try {
    return await until(`${kind} stream answered`, () => {
      const err = h.ended();
      if (err) return `refused: ${err.code} ${err.details}`;
      return first ? 'served' : undefined;
    }, 15_000, 20);
  } finally {
    h.close();
  }
}

/** A telemetry report with `pki`: the answer's status. */
async function report(address: string, pki: HostPki): Promise<number> {
  const creds = mtlsCredentials(pki, isControlPlaneCert);
  const client = new (loadConfigProto().fulcrum.v1.TelemetryService as any)(address, creds, channelOptions);
  try {
    return await new Promise<number>((resolve) => {
      const call = client.Report((err: grpc.ServiceError | null) => resolve(err ? err.code : grpc.status.OK));
      call.write({ dataplaneId: '', health: [], counters: [] });
      call.end();
    });
  } finally {
    client.close();
  }
}

const bootstrapOf = (cp: ControlPlane) => Number(cp.bootstrapAddress.split(':').pop());
const renewAt = (cp: ControlPlane, pki: HostPki, dir: string) => renewCertificate({ controlPlane: cp.grpcAddress, stateDir: dir, current: { ...pki, bootstrapPort: bootstrapOf(cp) } });

describe('security: removing a host reaches every control-plane replica', () => {
  let cluster: PgCluster;
  let url: string;
  let dir: string;
  let a: ControlPlane;
  let b: ControlPlane;
  const closers: (() => void)[] = [];

  beforeAll(async () => {
    cluster = await startPgCluster();
    url = await cluster.newDatabase();
    dir = mkdtempSync(join(tmpdir(), 'sec-revoke-'));
    // Both replicas share the state folder: one key file, one fleet CA (docs/install.md).
    const start = () => startControlPlane({ stateDir: join(dir, 'cp'), store: url, apiPort: 0, grpcPort: 0, bootstrapPort: 0, nodebalancerPool: '127.93.42.0/24', databasePool: '127.93.43.0/24', logger: silentLogger() });
    a = await start();
    b = await start();
  }, 180_000);

  afterAll(async () => {
    for (const c of closers) c();
    await b?.close();
    await a?.close();
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  describe('a data plane and an agent on B, removed through A', () => {
    let dpPki: HostPki;
    let agentPki: HostPki;
    let oldTokens: string[];
    let keep: ScriptedAgent;
    let proxySources: () => string[];
    let streams: Record<'config' | 'telemetry' | 'agent', Held>;
    let t0 = 0;

    beforeAll(async () => {
      const viaA = api(a.apiUrl, a.adminToken);
      dpPki = await issueHostPki(a, 'dataplane', 'rv-dp');
      agentPki = await issueHostPki(a, 'agent', 'rv-agent');
      // A join token for each, made before the removal and never used.
      oldTokens = await Promise.all(['dataplane', 'agent'].map(async (role) => (await viaA('POST', '/v4/fulcrum/join-tokens', { role, id: role === 'dataplane' ? 'rv-dp' : 'rv-agent' })).body.token as string));

      // An agent that stays, on B, holding a database: its desired state names the addresses its
      // members accept PROXY headers from.
      keep = startScriptedAgent(b.grpcAddress, { id: 'rv-keep', region: 'us-east', credentials: mtlsCredentials(await issueHostPki(a, 'agent', 'rv-keep', 'us-east'), isControlPlaneCert) });
      closers.push(() => keep.close());
      await until('rv-keep connected to B', () => keep.desired(), 20_000);
      const engines = (await viaA('GET', '/v4/databases/engines')).body.data as { id: string }[];
      const made = await viaA('POST', '/v4/databases/mysql/instances', { label: 'rv-db', region: 'us-east', type: 'g6-standard-1', engine: engines[0]!.id, allow_list: ['127.0.0.2/32'] });
      expect(made.status, JSON.stringify(made.body)).toBe(200);
      proxySources = () => keep.desired()?.databases.find((d) => Number(d.id) === made.body.id)?.proxySources ?? [];
      await until('the database placed on rv-keep', () => keep.desired()?.databases.some((d) => Number(d.id) === made.body.id), 20_000);

      // The data plane (config and telemetry) and the agent hold their streams on B.
      streams = { config: hold(b.grpcAddress, dpPki, 'config'), telemetry: hold(b.grpcAddress, dpPki, 'telemetry'), agent: hold(b.grpcAddress, agentPki, 'agent') };
      for (const h of Object.values(streams)) closers.push(h.close);
      await streams.config.first;
      await streams.agent.first;
      // The control case: B trusts the data plane's address while it is a member of the fleet.
      await until('B trusts the data plane address', () => proxySources().includes(DP_SOURCE), 20_000);

      t0 = Date.now();
      expect((await viaA('DELETE', '/v4/fulcrum/dataplanes/rv-dp')).status).toBe(200);
      expect((await viaA('DELETE', '/v4/fulcrum/agents/rv-agent')).status).toBe(200);
    }, 90_000);

    it('ends its config, telemetry and agent streams on B within a few seconds; reconnecting is refused on both replicas', async () => {
      const ends: Record<string, number> = {};
      await until('every stream of the removed hosts on B ended', () => {
        for (const [name, h] of Object.entries(streams)) if (h.ended() && !(name in ends)) ends[name] = Date.now() - t0;
        return Object.keys(ends).length === 3;
      }, CLOSE_WITHIN_MS + 2_000, 20).catch((err: Error) => {
        throw new Error(`${err.message}; ended so far: ${JSON.stringify(ends)}`);
      });
      for (const h of Object.values(streams)) expect(h.ended()!.code).toBe(grpc.status.PERMISSION_DENIED);
      for (const ms of Object.values(ends)) expect(ms).toBeLessThan(CLOSE_WITHIN_MS);
      process.stdout.write(`streams on B ended after ${JSON.stringify(ends)} ms\n`);

      // Reconnecting with the old certificates is refused on both replicas, telemetry included.
      for (const cp of [a, b]) {
        expect(await served(cp.grpcAddress, dpPki, 'config')).toMatch(/^refused: 7 .*revoked/);
        expect(await served(cp.grpcAddress, agentPki, 'agent')).toMatch(/^refused: 7 .*revoked/);
        expect(await report(cp.grpcAddress, dpPki)).toBe(grpc.status.PERMISSION_DENIED);
      }
    }, 60_000);

    it('B no longer hands the removed data plane\'s address to the members as a PROXY header sender', async () => {
      await until('B forgot the data plane address', () => !proxySources().includes(DP_SOURCE), CLOSE_WITHIN_MS);
    }, 30_000);

    it('join tokens made for it before the removal are refused; one made after brings it back, its old certificate still refused', async () => {
      for (const [i, token] of oldTokens.entries()) {
        const t = parseJoinToken(token);
        const { csrPem } = generateKeyAndCsr();
        await expect(b.context.fleet.join(`${t.id}.${t.secret}`, i === 0 ? 'dataplane' : 'agent', csrPem)).rejects.toThrow(/already used/);
      }
      await expect(joinFleet({ controlPlane: a.grpcAddress, token: oldTokens[0]!, role: 'dataplane', stateDir: join(dir, 'old-token') })).rejects.toThrow(/already used/);

      const fresh = (await api(a.apiUrl, a.adminToken)('POST', '/v4/fulcrum/join-tokens', { role: 'dataplane', id: 'rv-dp' })).body.token as string;
      await joinFleet({ controlPlane: b.grpcAddress, token: fresh, role: 'dataplane', stateDir: join(dir, 'rejoined') });
      expect(await served(b.grpcAddress, loadHostPki(join(dir, 'rejoined'))!, 'config')).toBe('served');
      expect(await served(a.grpcAddress, dpPki, 'config')).toMatch(/^refused: 7/);
    }, 60_000);
  });

  it('a removal whose notification B never hears still ends B\'s stream within the re-check interval', async () => {
    const pki = await issueHostPki(a, 'dataplane', 'rv-silent');
    const config = hold(b.grpcAddress, pki, 'config');
    closers.push(config.close);
    await config.first;
    // Revoked in the store behind every replica's back: no notification at all.
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      await c.query('UPDATE fleet_certificates SET revoked_at = $1 WHERE host_id = $2', [Date.now(), 'rv-silent']);
    } finally {
      await c.end();
    }
    const t0 = Date.now();
    await until('the stream on B ended', () => config.ended(), CLOSE_WITHIN_MS);
    expect(config.ended()!.code).toBe(grpc.status.PERMISSION_DENIED);
    expect(Date.now() - t0).toBeLessThan(CLOSE_WITHIN_MS);
  }, 30_000);

  it('a renewal in flight while the host is removed, or asked for after, never yields a certificate a replica accepts', async () => {
    const pki = await issueHostPki(a, 'dataplane', 'rv-renew');
    const serial = new X509Certificate(pki.certPem).serialNumber;
    // B's renewal has checked the certificate (valid) and is held there until the removal
    // through A has committed; then it goes on to sign and record.
    const fleetRepo = b.context.store.fleet;
    const lookUp = fleetRepo.cert.bind(fleetRepo);
    let removed!: () => void;
    const removal = new Promise<void>((r) => (removed = r));
    let held = false;
    fleetRepo.cert = async (s: string) => {
      const rec = await lookUp(s);
      if (s === serial && !held) {
        held = true;
        await removal;
      }
      return rec;
    };
    try {
      const inFlight = renewAt(b, pki, join(dir, 'renew-inflight')).then((p) => p, (err: Error) => err);
      await until('the renewal reached its certificate check', () => held, 15_000, 10);
      expect((await api(a.apiUrl, a.adminToken)('DELETE', '/v4/fulcrum/dataplanes/rv-renew')).status).toBe(200);
      removed();
      const outcome = await inFlight;
      if (!(outcome instanceof Error)) {
        // Whatever was issued, no replica may accept it.
        for (const cp of [a, b]) expect(await served(cp.grpcAddress, outcome, 'config')).toMatch(/^refused/);
      }
      expect(outcome).toBeInstanceOf(Error);
      expect((outcome as Error).message).toMatch(/revoked/);
    } finally {
      fleetRepo.cert = lookUp;
    }
    // After the removal, renewing with the old certificate is refused by both replicas.
    for (const cp of [a, b]) await expect(renewAt(cp, pki, join(dir, `renew-after-${cp === a ? 'a' : 'b'}`))).rejects.toThrow(/revoked/);
  }, 60_000);

  it(`renewals are limited to ${CERTS_PER_HOST_PER_HOUR} certificates per host per hour, across replicas`, async () => {
    let pki = await issueHostPki(a, 'agent', 'rv-limit');
    // The join was one; the renewals alternate between the replicas.
    for (let i = 1; i < CERTS_PER_HOST_PER_HOUR; i++) pki = { ...(await renewAt(i % 2 ? b : a, pki, join(dir, `limit-${i}`))), bootstrapPort: pki.bootstrapPort };
    await expect(renewAt(a, pki, join(dir, 'limit-over'))).rejects.toThrow(/429|in the last hour/);
    await expect(renewAt(b, pki, join(dir, 'limit-over-b'))).rejects.toThrow(/429|in the last hour/);
    // The last certificate issued is still good: the limit refuses a new one, nothing more.
    expect(await served(b.grpcAddress, pki, 'agent')).toBe('served');
  }, 60_000);
});
