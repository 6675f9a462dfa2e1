import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grpc, loadConfigProto } from '../../../lib/grpc.js';
import type { ConfigAck } from '../../../proto/gen/fulcrum/v1/ConfigAck.js';
import type { ConfigSnapshot__Output } from '../../../proto/gen/fulcrum/v1/ConfigSnapshot.js';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { waitFor } from '../../helpers/backends.js';

/**
 * The control plane's side of incremental snapshots over a real gRPC stream (docs/dataplane.md,
 * "Incremental snapshots"): a data plane that says so in its hello gets a full snapshot, then
 * only what each write changed on top of the version it ACKed; after a NACK, and on every
 * reconnect, the whole state again; a data plane that does not say so gets whole snapshots.
 */
interface Stream {
  next(): Promise<ConfigSnapshot__Output>;
  answer(snap: ConfigSnapshot__Output, errorDetail?: string): void;
  close(): void;
}

function open(address: string, id: string, incremental: boolean, versionApplied = 0): Stream {
  const proto = loadConfigProto();
  const client = new proto.fulcrum.v1.ConfigService(address, grpc.credentials.createInsecure()) as any;
  const call = client.Stream() as grpc.ClientDuplexStream<ConfigAck, ConfigSnapshot__Output>;
  const queue: ConfigSnapshot__Output[] = [];
  const waiting: ((s: ConfigSnapshot__Output) => void)[] = [];
  call.on('data', (s: ConfigSnapshot__Output) => (waiting.length ? waiting.shift()!(s) : queue.push(s)));
  call.on('error', () => undefined);
  call.write({ dataplaneId: id, region: '*', versionApplied, responseNonce: '', incremental });
  return {
    next: () => new Promise((resolve, reject) => {
      if (queue.length) return resolve(queue.shift()!);
      const timer = setTimeout(() => reject(new Error('no snapshot within 20 s')), 20_000);
      waiting.push((s) => (clearTimeout(timer), resolve(s)));
    }),
    answer: (snap, errorDetail) => call.write({ dataplaneId: id, region: '*', versionApplied: errorDetail ? 0 : snap.version, responseNonce: snap.nonce, errorDetail: errorDetail ?? '' }),
    close: () => {
      call.cancel();
      client.close();
    },
  };
}

describe('incremental config push', () => {
  let api: ApiHarness;
  const pool = `127.${170 + Math.floor(Math.random() * 20)}.${1 + Math.floor(Math.random() * 250)}.0/24`;
  const nbs: { id: number; configId: number; nodeId: number }[] = [];

  const createNb = async (label: string) => {
    const res = await api.req('POST', '/v4/nodebalancers', {
      body: { region: 'us-east', label, configs: [{ port: 8080, protocol: 'tcp', nodes: [{ label: 'node-1', address: '192.0.2.10:80' }] }] },
    });
    expect(res.status, res.text).toBe(200);
    const configId = (await api.req('GET', `/v4/nodebalancers/${res.body.id}/configs`)).body.data[0].id;
    const nodeId = (await api.req('GET', `/v4/nodebalancers/${res.body.id}/configs/${configId}/nodes`)).body.data[0].id;
    return { id: res.body.id as number, configId, nodeId };
  };
  const moveNode = (nb: { id: number; configId: number; nodeId: number }, address: string) =>
    api.req('PUT', `/v4/nodebalancers/${nb.id}/configs/${nb.configId}/nodes/${nb.nodeId}`, { body: { address } });

  beforeAll(async () => {
    api = await startApi({ nodebalancerPool: pool, insecureGrpc: true });
    for (const label of ['incr-a', 'incr-b', 'incr-c']) nbs.push(await createNb(label));
  });
  afterAll(async () => {
    await api?.close();
  });

  it('sends the whole state first, then only what each write changed, on top of the ACKed version', async () => {
    const s = open(api.cp.grpcAddress, 'dp-incr-1', true);
    try {
      const full = await s.next();
      expect(full.incremental).toBe(false);
      expect(full.nodebalancers.map((nb) => nb.id).sort()).toEqual(nbs.map((nb) => nb.id).sort());
      s.answer(full);

      expect((await moveNode(nbs[0]!, '192.0.2.11:80')).status).toBe(200);
      const changed = await s.next();
      expect(changed.incremental).toBe(true);
      expect(changed.baseVersion).toBe(full.version);
      expect(changed.version).toBeGreaterThan(full.version);
      expect(changed.nodebalancers.map((nb) => nb.id)).toEqual([nbs[0]!.id]);
      expect(changed.nodebalancers[0]!.version).toBe(changed.version);
      expect(changed.nodebalancers[0]!.configs[0]!.nodes[0]!.address).toBe('192.0.2.11:80');
      expect(changed.removedNodebalancers).toEqual([]);
      s.answer(changed);

      // A change while a delta is unanswered waits for the answer, then goes on top of it.
      expect((await moveNode(nbs[1]!, '192.0.2.12:80')).status).toBe(200);
      const second = await s.next();
      expect((await moveNode(nbs[1]!, '192.0.2.13:80')).status).toBe(200);
      const extra = await createNb('incr-d');
      s.answer(second);
      const third = await s.next();
      expect(third.baseVersion).toBe(second.version);
      expect(third.nodebalancers.map((nb) => nb.id).sort()).toEqual([nbs[1]!.id, extra.id].sort());
      s.answer(third);

      expect((await api.req('DELETE', `/v4/nodebalancers/${extra.id}`)).status).toBe(200);
      const removed = await s.next();
      expect(removed.incremental).toBe(true);
      expect(removed.baseVersion).toBe(third.version);
      expect(removed.nodebalancers).toEqual([]);
      expect(removed.removedNodebalancers).toEqual([extra.id]);
      s.answer(removed);
      await waitFor(async () => (await api.req('GET', '/v4/fulcrum/dataplanes')).body.data.find((d: any) => d.id === 'dp-incr-1' && d.versionApplied === removed.version), 10_000, 'the ACK recorded');
    } finally {
      s.close();
    }
  });

  it('after a NACKed delta the next change sends the whole state; a reconnect gets the whole state', async () => {
    const s = open(api.cp.grpcAddress, 'dp-incr-2', true);
    let full: ConfigSnapshot__Output;
    let whole: ConfigSnapshot__Output;
    try {
      full = await s.next();
      s.answer(full);
      expect((await moveNode(nbs[2]!, '192.0.2.21:80')).status).toBe(200);
      const delta = await s.next();
      expect(delta.incremental).toBe(true);
      s.answer(delta, 'cannot listen on 127.0.0.1:8080: EADDRINUSE');
      await waitFor(async () => (await api.req('GET', '/v4/fulcrum/dataplanes')).body.data.find((d: any) => d.id === 'dp-incr-2' && d.lastError), 10_000, 'the NACK recorded');

      expect((await moveNode(nbs[2]!, '192.0.2.22:80')).status).toBe(200);
      whole = await s.next();
      expect(whole.incremental).toBe(false);
      expect(whole.nodebalancers.length).toBe(nbs.length);
      s.answer(whole);
    } finally {
      s.close();
    }
    const again = open(api.cp.grpcAddress, 'dp-incr-2', true);
    try {
      const onReconnect = await again.next();
      expect(onReconnect.incremental).toBe(false);
      expect(onReconnect.nodebalancers.map((nb) => nb.id).sort()).toEqual(nbs.map((nb) => nb.id).sort());
      again.answer(onReconnect);
    } finally {
      again.close();
    }
    // One that says it serves an older version gets the whole state too...
    const older = open(api.cp.grpcAddress, 'dp-incr-2', true, whole.version - 1);
    try {
      expect((await older.next()).incremental).toBe(false);
    } finally {
      older.close();
    }
    // ...and one that serves the current version an empty change on top of it, then deltas.
    const current = open(api.cp.grpcAddress, 'dp-incr-2', true, whole.version);
    try {
      const resumed = await current.next();
      expect(resumed).toMatchObject({ incremental: true, baseVersion: whole.version, version: whole.version, nodebalancers: [], removedNodebalancers: [] });
      current.answer(resumed);
      expect((await moveNode(nbs[2]!, '192.0.2.23:80')).status).toBe(200);
      const next = await current.next();
      expect(next.incremental).toBe(true);
      expect(next.baseVersion).toBe(whole.version);
      expect(next.nodebalancers.map((nb) => nb.id)).toEqual([nbs[2]!.id]);
    } finally {
      current.close();
    }
  });

  it('a data plane that does not ask for incremental snapshots gets whole ones', async () => {
    const s = open(api.cp.grpcAddress, 'dp-incr-3', false);
    try {
      s.answer(await s.next());
      expect((await moveNode(nbs[0]!, '192.0.2.31:80')).status).toBe(200);
      const next = await s.next();
      expect(next.incremental).toBe(false);
      expect(next.nodebalancers.length).toBe(nbs.length);
    } finally {
      s.close();
    }
  });
});
