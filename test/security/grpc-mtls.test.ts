/**
 * docs/security/grpc.md, "The gRPC channel": attackers who reach the control plane's gRPC port
 * try to read every NodeBalancer's TLS key (ConfigService.Stream, region *), take over a real
 * agent's stream to read every `linroot` password (AgentService.Stream with its id), forge
 * telemetry, and send oversized messages. Each is refused and receives nothing. A real control
 * plane (mTLS, its own CA), real sockets and real gRPC; the clients are hand-written attackers.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { channelOptions, grpc, loadAgentProto, loadConfigProto, mtlsCredentials } from '../../lib/grpc.js';
import { isControlPlaneCert } from '../../lib/fleet-host.js';
import { identityUri, openssl, type HostPki } from '../../lib/pki.js';
import { startApi, type ApiHarness } from '../helpers/api-harness.js';
import { issueHostPki } from '../helpers/fleet.js';
import { makeCa, makeCert } from '../helpers/certs.js';
import { firstEngine, waitStatus } from '../integration/databases/helpers.js';
import { startScriptedAgent, type ScriptedAgent } from '../integration/databases/scripted-agent.js';

const MYSQL = '/v4/databases/mysql/instances';

interface Outcome {
  /** Every message the server sent, serialized (searched for keys and passwords). */
  received: string;
  error?: grpc.ServiceError;
}

/** Opens a bidi stream, sends `first`, collects what arrives for `ms`, then cancels. */
function tryStream(kind: 'config' | 'agent', address: string, creds: grpc.ChannelCredentials, first: Record<string, unknown>, ms = 1500): Promise<Outcome> {
  const Client = kind === 'config' ? loadConfigProto().fulcrum.v1.ConfigService : loadAgentProto().fulcrum.v1.AgentService;
  // The attacker's client sends whatever size it likes; only the server's limit counts.
  const client = new (Client as any)(address, creds, { ...channelOptions, 'grpc.max_send_message_length': -1 });
  return new Promise((resolve) => {
    const out: Outcome = { received: '' };
    const call = client.Stream();
    const finish = () => {
      clearTimeout(timer);
      call.cancel();
      client.close();
      resolve(out);
    };
    const timer = setTimeout(finish, ms);
    call.on('data', (m: unknown) => (out.received += JSON.stringify(m)));
    call.on('error', (e: grpc.ServiceError) => {
      out.error = e;
      finish();
    });
    call.on('end', finish);
    call.write(first);
  });
}

function tryTelemetry(address: string, creds: grpc.ChannelCredentials, report: Record<string, unknown>): Promise<grpc.ServiceError | null> {
  const client = new (loadConfigProto().fulcrum.v1.TelemetryService as any)(address, creds, channelOptions);
  return new Promise((resolve) => {
    const call = client.Report((err: grpc.ServiceError | null) => {
      client.close();
      resolve(err);
    });
    call.on('error', () => undefined);
    call.write(report);
    setTimeout(() => call.end(), 300);
  });
}

/** A certificate naming a real data plane's identity, but signed by a CA of the attacker's. */
function foreignPki(caPem: string): HostPki {
  const ca = makeCa('Attacker CA');
  const leaf = makeCert(ca, 'dp-real');
  const uri = identityUri({ role: 'dataplane', id: 'dp-real', region: 'us-east' });
  const csr = openssl(['req', '-new', '-key', 'k.pem', '-subj', '/CN=dp-real'], { 'k.pem': leaf.key });
  const certPem = openssl(['x509', '-req', '-in', 'c.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-set_serial', '7', '-days', '1', '-extfile', 'e.cnf'],
    { 'c.csr': csr, 'ca.crt': ca.cert, 'ca.key': ca.key, 'e.cnf': `subjectAltName=URI:${uri}\nextendedKeyUsage=clientAuth\n` });
  return { caPem, certPem, keyPem: leaf.key };
}

describe('the gRPC channel refuses peers without the right certificate', () => {
  let api: ApiHarness;
  let addr: string;
  let realAgent: ScriptedAgent;
  let sslKey: string;
  let password: string;
  const creds = (pki: HostPki) => mtlsCredentials(pki, isControlPlaneCert);
  const keyMarker = () => sslKey.split('\n')[1]!;

  beforeAll(async () => {
    api = await startApi();
    addr = api.cp.grpcAddress;
    const ca = makeCa();
    const tls = makeCert(ca, 'shop.example');
    sslKey = tls.key;
    const nb = await api.req('POST', '/v4/nodebalancers', {
      body: { region: 'us-east', label: 'sec-tls', configs: [{ port: 443, protocol: 'https', ssl_cert: tls.cert, ssl_key: tls.key, nodes: [{ address: '192.168.200.10:80', label: 'web-1' }] }] },
    });
    expect(nb.status).toBe(200);
    // A real agent (with its own certificate) runs a database, so the store has a linroot password to steal.
    realAgent = startScriptedAgent(addr, { id: 'agent-real', region: 'us-east', credentials: creds(await issueHostPki(api.cp, 'agent', 'agent-real', 'us-east')) });
    const engine = await firstEngine(api);
    const db = await api.req('POST', MYSQL, { body: { label: 'sec-db', region: 'us-east', type: 'g6-nanode-1', engine, allow_list: [] } });
    await waitStatus(api, db.body.id, 'active');
    password = (await api.req('GET', `${MYSQL}/${db.body.id}/credentials`)).body.password;
    expect(password).toMatch(/^[A-Za-z0-9._]{16}$/);
  });

  afterAll(async () => {
    realAgent?.close();
    await api?.close();
  });

  it('serves the key to the data plane whose certificate allows it (the control case)', async () => {
    const pki = await issueHostPki(api.cp, 'dataplane', 'dp-good', 'us-east');
    const r = await tryStream('config', addr, creds(pki), { dataplaneId: 'dp-good', region: 'us-east', versionApplied: 0, responseNonce: '' });
    expect(r.received).toContain(keyMarker());
  });

  it('refuses a client without a certificate: no snapshot, no key', async () => {
    const r = await tryStream('config', addr, grpc.credentials.createInsecure(), { dataplaneId: 'x', region: '*', versionApplied: 0, responseNonce: '' });
    // No connection established at all (the TLS handshake refused), on the address the control
    // case is served on: UNAVAILABLE, not an answer of the service.
    expect(r.error?.code).toBe(grpc.status.UNAVAILABLE);
    expect(r.error?.details).toMatch(/No connection established/);
    expect(r.received).toBe('');
    // TLS without a client certificate fails at the handshake too.
    const anon = grpc.credentials.createSsl(Buffer.from(api.cp.context.fleet.caPem), null, null, { checkServerIdentity: () => undefined });
    const r2 = await tryStream('config', addr, anon, { dataplaneId: 'x', region: '*', versionApplied: 0, responseNonce: '' });
    expect(r2.error?.code).toBe(grpc.status.UNAVAILABLE);
    expect(r2.error?.details).toMatch(/No connection established/);
    expect(r2.received).toBe('');
  });

  it('refuses a certificate from another CA even when it names a real data plane', async () => {
    const r = await tryStream('config', addr, creds(foreignPki(api.cp.context.fleet.caPem)), { dataplaneId: 'dp-real', region: 'us-east', versionApplied: 0, responseNonce: '' });
    expect(r.error?.code).toBe(grpc.status.UNAVAILABLE);
    expect(r.error?.details).toMatch(/No connection established/);
    expect(r.received).toBe('');
  });

  it('refuses another host\'s kind of certificate: a data plane cannot open the agent stream, an agent not the config stream', async () => {
    const dp = await issueHostPki(api.cp, 'dataplane', 'agent-real', 'us-east');
    const r = await tryStream('agent', addr, creds(dp), { agentId: 'agent-real', region: 'us-east', hello: true });
    expect(r.error?.code).toBe(grpc.status.PERMISSION_DENIED);
    expect(r.received).not.toContain(password);
    expect(r.received).toBe('');
    const ag = await issueHostPki(api.cp, 'agent', 'agent-x', '*');
    const r2 = await tryStream('config', addr, creds(ag), { dataplaneId: '', region: '', versionApplied: 0, responseNonce: '' });
    expect(r2.error?.code).toBe(grpc.status.PERMISSION_DENIED);
    expect(r2.received).toBe('');
  });

  it('refuses a valid certificate that claims another id or region: no key, no password', async () => {
    const dp = creds(await issueHostPki(api.cp, 'dataplane', 'dp-small', 'us-east'));
    for (const claim of [{ dataplaneId: 'dp-good', region: 'us-east' }, { dataplaneId: 'dp-small', region: '*' }, { dataplaneId: 'dp-small', region: 'lab-local' }]) {
      const r = await tryStream('config', addr, dp, { ...claim, versionApplied: 0, responseNonce: '' });
      expect(r.error?.code, JSON.stringify(claim)).toBe(grpc.status.PERMISSION_DENIED);
      expect(r.received).not.toContain(keyMarker());
    }
    // An agent of its own takes over the real agent's stream by claiming its id.
    const evil = creds(await issueHostPki(api.cp, 'agent', 'agent-evil', 'us-east'));
    const r = await tryStream('agent', addr, evil, { agentId: 'agent-real', region: 'us-east', hello: true });
    expect(r.error?.code).toBe(grpc.status.PERMISSION_DENIED);
    expect(r.received).not.toContain(password);
    // The real agent keeps its stream and its database.
    const agents = await api.req('GET', '/v4/fulcrum/agents');
    expect(agents.body.data.find((a: any) => a.id === 'agent-real')).toMatchObject({ connected: true });
    expect(realAgent.desired()!.databases[0]!.rootPassword).toBe(password);
  });

  it('refuses telemetry without a certificate, from an agent, or speaking for another data plane', async () => {
    const report = (id: string) => ({ dataplaneId: id, health: [], counters: [{ nodebalancerId: 1, configId: 1, bytesIn: 1e12, bytesOut: 1e12, connections: 1e6, atMs: Date.now() }] });
    expect((await tryTelemetry(addr, grpc.credentials.createInsecure(), report('x')))?.code).toBeDefined();
    const ag = creds(await issueHostPki(api.cp, 'agent', 'agent-t', '*'));
    expect((await tryTelemetry(addr, ag, report('agent-t')))?.code).toBe(grpc.status.PERMISSION_DENIED);
    const dp = creds(await issueHostPki(api.cp, 'dataplane', 'dp-t', 'us-east'));
    expect((await tryTelemetry(addr, dp, report('dp-good')))?.code).toBe(grpc.status.PERMISSION_DENIED);
    // Nothing of the forged traffic was recorded.
    const stats = api.cp.context.db!.prepare('SELECT COALESCE(SUM(bytes_in), 0) FROM nb_traffic').pluck().get() as number;
    expect(stats).toBeLessThan(1e12);
  });

  it('records telemetry only for NodeBalancers in the region the certificate names', async () => {
    const nb = (await api.req('GET', '/v4/nodebalancers')).body.data.find((x: any) => x.label === 'sec-tls');
    const config = (await api.req('GET', `/v4/nodebalancers/${nb.id}/configs`)).body.data[0];
    const node = (await api.req('GET', `/v4/nodebalancers/${nb.id}/configs/${config.id}/nodes`)).body.data[0];
    const status = async () => (await api.req('GET', `/v4/nodebalancers/${nb.id}/configs/${config.id}/nodes/${node.id}`)).body.status;
    const traffic = () => api.cp.context.db!.prepare('SELECT COALESCE(SUM(bytes_in), 0) FROM nb_traffic WHERE nodebalancer_id = ?').pluck().get(nb.id) as number;
    const report = (id: string, health: string) => ({
      dataplaneId: id,
      health: [{ nodebalancerId: nb.id, configId: config.id, nodeId: node.id, status: health, atMs: Date.now() }],
      counters: [{ nodebalancerId: nb.id, configId: config.id, bytesIn: 5e9, bytesOut: 5e9, connections: 1000, atMs: Date.now() }],
    });
    const before = { status: await status(), traffic: traffic() };
    // A data plane of another region (sec-tls is in us-east) forges health and traffic: ignored.
    const other = creds(await issueHostPki(api.cp, 'dataplane', 'dp-lab-local', 'lab-local'));
    expect(await tryTelemetry(addr, other, report('dp-lab-local', before.status === 'DOWN' ? 'UP' : 'DOWN'))).toBeNull();
    expect(await status()).toBe(before.status);
    expect(traffic()).toBe(before.traffic);
    // The same report from a data plane of us-east is what the API shows (the control case).
    const own = creds(await issueHostPki(api.cp, 'dataplane', 'dp-us-east', 'us-east'));
    expect(await tryTelemetry(addr, own, report('dp-us-east', 'DOWN'))).toBeNull();
    expect(await status()).toBe('DOWN');
    expect(traffic()).toBe(before.traffic + 5e9);
  });

  it('refuses a message larger than a peer ever needs to send (4 MiB), even from a valid certificate', async () => {
    const dp = creds(await issueHostPki(api.cp, 'dataplane', 'dp-big', 'us-east'));
    const r = await tryStream('config', addr, dp, { dataplaneId: 'dp-big', region: 'us-east', versionApplied: 0, responseNonce: '', errorDetail: 'x'.repeat(5 * 1024 * 1024) });
    expect(r.error?.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(r.received).toBe('');
  });
});
