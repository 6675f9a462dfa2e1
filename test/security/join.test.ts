/**
 * docs/security/grpc.md, "Joining a host" and "Revoking": a second host joins with a one-time
 * join token and nothing else copied by hand (a real `fulcrum dataplane` process with an empty
 * state folder); the token cannot be replayed, a control plane whose CA does not match the
 * token's pin is refused, a restricted user cannot make tokens, and once an admin removes the
 * data plane through the API its open stream is closed and its next one refused.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { channelOptions, grpc, loadAgentProto, loadConfigProto, mtlsCredentials } from '../../lib/grpc.js';
import { X509Certificate } from 'node:crypto';
import { formatJoinToken, isControlPlaneCert, joinFleet, parseJoinToken, renewCertificate } from '../../lib/fleet-host.js';
import { hostIdentity, loadHostPki, type HostPki } from '../../lib/pki.js';
import { issueHostPki } from '../helpers/fleet.js';
import { startScriptedAgent } from '../integration/databases/scripted-agent.js';
import { startApi, type ApiHarness } from '../helpers/api-harness.js';
import { runFulcrum, until } from '../helpers/lab.js';

/** Opens a stream with a host's certificate; resolves with the first message or the error. */
function openWith(address: string, pkiOrDir: string | HostPki, kind: 'config' | 'agent' = 'config'): Promise<{ snapshot?: unknown; error?: grpc.ServiceError }> {
  const pki = typeof pkiOrDir === 'string' ? loadHostPki(pkiOrDir)! : pkiOrDir;
  const Client = kind === 'config' ? loadConfigProto().fulcrum.v1.ConfigService : loadAgentProto().fulcrum.v1.AgentService;
  const client = new (Client as any)(address, mtlsCredentials(pki, isControlPlaneCert), channelOptions);
  return new Promise((resolve) => {
    const call = client.Stream();
    const done = (r: { snapshot?: unknown; error?: grpc.ServiceError }) => {
      call.cancel();
      client.close();
      resolve(r);
    };
    call.on('data', (s: unknown) => done({ snapshot: s }));
    call.on('error', (e: grpc.ServiceError) => done({ error: e }));
    call.write(kind === 'config' ? { dataplaneId: '', region: '', versionApplied: 0, responseNonce: '' } : { agentId: '', region: '', hello: true });
  });
}

describe('a second host joins with a token, and is revoked when removed', () => {
  let api: ApiHarness;
  let dir: string;
  let dp: ChildProcess | undefined;
  let log = '';

  beforeAll(async () => {
    api = await startApi();
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-join-'));
  });

  afterAll(async () => {
    if (dp && dp.exitCode === null) {
      const gone = new Promise((r) => dp!.once('exit', r));
      dp.kill('SIGTERM');
      await gone;
    }
    await api?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const dataplane = async (id: string) => (await api.req('GET', '/v4/fulcrum/dataplanes')).body.data.find((d: any) => d.id === id);

  it('refuses join tokens to restricted users and validates the request', async () => {
    const restricted = await api.userToken('joiner', { restricted: true, grants: { global: { add_nodebalancers: true } } });
    const r = await api.req('POST', '/v4/fulcrum/join-tokens', { token: restricted, body: { role: 'dataplane', id: 'x' } });
    expect(r.status).toBe(403);
    const bad = await api.req('POST', '/v4/fulcrum/join-tokens', { body: { role: 'root', id: '../x', region: 'mars', expiry_seconds: 5 } });
    expect(bad.status).toBe(400);
    expect(bad.body.errors.map((e: any) => e.field).sort()).toEqual(['expiry_seconds', 'id', 'region', 'role']);
  });

  it('joins a real data plane process from an empty state folder with only the token and the address', async () => {
    const r = await api.req('POST', '/v4/fulcrum/join-tokens', { body: { role: 'dataplane', id: 'dp-second', region: 'us-east' } });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ role: 'dataplane', id: 'dp-second', region: 'us-east' });
    const token: string = r.body.token;
    dp = runFulcrum(['dataplane', '--join', token, '--control-plane', api.cp.grpcAddress, '--state', join(dir, 'dp')]);
    dp.stdout!.on('data', (b) => (log = (log + b).slice(-10_000)));
    dp.stderr!.on('data', (b) => (log = (log + b).slice(-10_000)));
    await until('the joined data plane connected', async () => (await dataplane('dp-second'))?.connected || (dp!.exitCode !== null ? (() => { throw new Error(log); })() : undefined), 30_000, 100);
    expect(await dataplane('dp-second')).toMatchObject({ region: 'us-east', connected: true });
    // Its key was made on the host and is kept private there.
    expect(statSync(join(dir, 'dp', 'pki')).mode & 0o777).toBe(0o700);
    for (const f of ['host.key', 'host.crt', 'ca.crt']) expect(statSync(join(dir, 'dp', 'pki', f)).mode & 0o777).toBe(0o600);

    // The token was single use.
    await expect(joinFleet({ controlPlane: api.cp.grpcAddress, token, role: 'dataplane', stateDir: join(dir, 'replay') })).rejects.toThrow(/already used/);
  });

  it('refuses to join a control plane whose CA does not match the pin in the token', async () => {
    const r = await api.req('POST', '/v4/fulcrum/join-tokens', { body: { role: 'agent', id: 'agent-pin', region: '*' } });
    const t = parseJoinToken(r.body.token);
    const forged = formatJoinToken({ ...t, pin: 'f'.repeat(64) });
    await expect(joinFleet({ controlPlane: api.cp.grpcAddress, token: forged, role: 'agent', stateDir: join(dir, 'pin') })).rejects.toThrow(/does not match/);
    // A token for an agent does not make a data plane.
    await expect(joinFleet({ controlPlane: api.cp.grpcAddress, token: r.body.token, role: 'dataplane', stateDir: join(dir, 'role') })).rejects.toThrow(/agent/);
  });

  let renewed: HostPki;
  it('renews a certificate over the authenticated channel: same identity, new key and serial', async () => {
    const current = loadHostPki(join(dir, 'dp'))!;
    renewed = await renewCertificate({ controlPlane: api.cp.grpcAddress, stateDir: join(dir, 'renewed'), current });
    expect(hostIdentity(renewed)).toEqual(hostIdentity(current));
    expect(new X509Certificate(renewed.certPem).serialNumber).not.toBe(new X509Certificate(current.certPem).serialNumber);
    expect(renewed.keyPem).not.toBe(current.keyPem);
    expect((await openWith(api.cp.grpcAddress, renewed)).snapshot).toBeDefined();
  });

  it('closes the stream of a data plane removed through the API and refuses its next one', async () => {
    const before = await openWith(api.cp.grpcAddress, join(dir, 'dp'));
    expect(before.snapshot).toBeDefined();
    const del = await api.req('DELETE', '/v4/fulcrum/dataplanes/dp-second');
    expect(del.status).toBe(200);
    await until('the removed data plane disconnected', async () => ((await dataplane('dp-second'))?.connected === false ? true : undefined), 10_000, 100);
    const after = await openWith(api.cp.grpcAddress, join(dir, 'dp'));
    expect(after.snapshot).toBeUndefined();
    expect(after.error?.code).toBe(grpc.status.PERMISSION_DENIED);
    expect(after.error?.details).toMatch(/revoked/);
    // Every certificate it was issued is revoked, and none can be renewed.
    expect((await openWith(api.cp.grpcAddress, renewed)).error?.code).toBe(grpc.status.PERMISSION_DENIED);
    await expect(renewCertificate({ controlPlane: api.cp.grpcAddress, stateDir: join(dir, 'renewed2'), current: renewed })).rejects.toThrow(/revoked/);
    // The process keeps retrying and keeps being refused.
    await new Promise((r) => setTimeout(r, 2_000));
    expect((await dataplane('dp-second'))?.connected).toBe(false);
  });

  it('closes and refuses an agent removed through the API', async () => {
    const pki = await issueHostPki(api.cp, 'agent', 'agent-gone', 'us-east');
    const agent = startScriptedAgent(api.cp.grpcAddress, { id: 'agent-gone', region: 'us-east', credentials: mtlsCredentials(pki, isControlPlaneCert) });
    try {
      const agentRow = async () => (await api.req('GET', '/v4/fulcrum/agents')).body.data.find((a: any) => a.id === 'agent-gone');
      await until('agent connected', async () => ((await agentRow())?.connected ? true : undefined), 10_000, 100);
      expect((await api.req('DELETE', '/v4/fulcrum/agents/agent-gone')).status).toBe(200);
      await until('agent disconnected', async () => ((await agentRow())?.connected === false ? true : undefined), 10_000, 100);
      const next = await openWith(api.cp.grpcAddress, pki, 'agent');
      expect(next.error?.code).toBe(grpc.status.PERMISSION_DENIED);
    } finally {
      agent.close();
    }
  });
});
