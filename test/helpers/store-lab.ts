/**
 * An e2e lab of agents that share a real object store, in the root namespace: the control plane
 * and a data plane in-process (port 0, temporary state), a real S3-compatible store (Swift +
 * s3api over TLS, object-store.ts) and `fulcrum agent` processes from the sources that back up to
 * it (real processes, so a test can SIGKILL one), each on an address block of its own held
 * host-wide (claimOctet: its 127.79.<octet>.0/24 node pool). The test gets its own reader of the
 * store and each agent's metrics endpoint.
 *
 * Addresses: the first block's 127.78.<octet>.0/24 is the endpoint pool, 127.76.<octet>.1 the
 * data plane's source and 127.76.<octet>.2 the store; each agent's metrics listen on
 * 127.76.<its octet>.3.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startControlPlane, type ControlPlane } from '../../control-plane/main.js';
import { startDataplane, type Dataplane } from '../../dataplane/main.js';
import { silentLogger } from '../../lib/logger.js';
import { createProcessRuntime } from '../../agent/runtime/process-runtime.js';
import { createS3Stores, loadStoreCredentials, parseStoreUrl, type S3Stores } from '../../agent/backup/s3-store.js';
import { claimOctet, type OctetClaim } from './address-blocks.js';
import { enrolHost } from './fleet.js';
import { watch, type HostProcess } from './hosts.js';
import { apiCalls, repoRoot, testRateLimits, until } from './lab.js';
import { startObjectStore, type ObjectStore } from './object-store.js';
import { freePort } from './tcp.js';

const MYSQL = '/v4/databases/mysql/instances';

export interface StoreAgent {
  id: string;
  /** Its state folder. */
  dir: string;
  /** The first three octets of its node pool (`${net}.0/24`): a member's address starts with `${net}.`. */
  net: string;
  /** http://HOST:PORT/metrics of its Prometheus endpoint. */
  metricsUrl: string;
  /** The running `fulcrum agent`, once started. */
  proc?: HostProcess;
}

export interface StoreLab {
  cp: ControlPlane;
  dataplane: Dataplane;
  store: ObjectStore;
  /** The test's own client of the store, with the agents' view (manifests listed, unfinished uploads). */
  reader: S3Stores;
  agents: StoreAgent[];
  api: ReturnType<typeof apiCalls>['api'];
  ok: ReturnType<typeof apiCalls>['ok'];
  /** The ids of the agents connected now. */
  connected(): Promise<Set<string>>;
  /** Starts `fulcrum agent` for `a` (already enrolled) and waits until it is connected. */
  startAgent(a: StoreAgent): Promise<void>;
  /** Waits until database `id` is `status`; fails at once with its newest failed event's message. */
  waitStatus(id: number, status: string, timeoutMs?: number): Promise<any>;
  /** linroot's password and the database's CA (PEM). */
  credentials(id: number): Promise<{ password: string; ca: string }>;
  /** The value of an agent's metric (summed over its label sets), read from its endpoint now. */
  metric(a: StoreAgent, name: string): Promise<number>;
  /** Every file under the store's devices folder (Swift keeps each object as a `.data` file). */
  storeFiles(): string[];
  /**
   * The bytes of a file of the store, or undefined when it went meanwhile (Swift renames its
   * temporary files and replaces a deleted object's file while agents keep writing).
   */
  storeFile(path: string): Buffer | undefined;
  /** The agents' newest output, for onTestFailed. */
  explain(): string;
  close(): Promise<void>;
}

/**
 * Starts the lab with `agents` agents named `${name}-a-<octet>`, `${name}-b-<octet>`, ..., each
 * archiving binlogs every `archiveS` seconds, and waits until every one is connected.
 */
export async function startStoreLab(o: { name: string; agents: number; archiveS: number }): Promise<StoreLab> {
  const claims: OctetClaim[] = [];
  const agents: StoreAgent[] = [];
  let dir: string | undefined;
  let cp: ControlPlane | undefined;
  let dataplane: Dataplane | undefined;
  let store: ObjectStore | undefined;
  let reader: S3Stores | undefined;

  const close = async () => {
    for (const a of agents) {
      await a.proc?.kill();
      // Every node the agent ran (a database outlives its killed agent).
      const rt = createProcessRuntime({ root: join(a.dir, 'runtime'), logger: silentLogger() });
      for (const n of await rt.list({})) await rt.remove(n.name, { withData: true });
      await rt.close();
    }
    reader?.close();
    await dataplane?.close();
    await cp?.close();
    await store?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true, maxRetries: 5 });
    for (const c of claims) await c.release();
  };

  try {
    for (let i = 0; i < Math.max(1, o.agents); i++) claims.push(await claimOctet(100, 249));
    const first = claims[0]!.octet;
    dir = mkdtempSync(join(tmpdir(), `fulcrum-${o.name}-`));
    // The store on the first block's address: nothing else of this host listens there.
    store = await startObjectStore({ host: `127.76.${first}.2` });
    const url = `s3://${store.bucket}/us-east`;
    reader = createS3Stores({ ...parseStoreUrl(url), endpoint: store.endpoint, region: store.region, pathStyle: true, ca: store.ca, credentials: loadStoreCredentials(store.credentialsFile) });
    cp = await startControlPlane({ stateDir: join(dir, 'cp'), apiPort: 0, grpcPort: 0, databasePool: `127.78.${first}.0/24`, logger: silentLogger(), rateLimits: testRateLimits });
    await enrolHost(cp, join(dir, 'dp'), 'dataplane', `${o.name}-dp-${first}`, 'us-east');
    dataplane = await startDataplane({ controlPlane: cp.grpcAddress, stateDir: join(dir, 'dp'), logger: silentLogger(), endpointSource: `127.76.${first}.1`, telemetryIntervalMs: 500 });
    for (const [i, c] of claims.entries()) {
      const host = `127.76.${c.octet}.3`;
      const port = await freePort(host);
      agents.push({ id: `${o.name}-${String.fromCharCode(97 + i)}-${c.octet}`, dir: join(dir, String.fromCharCode(97 + i)), net: `127.79.${c.octet}`, metricsUrl: `http://${host}:${port}/metrics` });
    }
    for (const a of agents) await enrolHost(cp, a.dir, 'agent', a.id, 'us-east');
  } catch (err) {
    await close();
    throw err;
  }

  const c = cp;
  const { api, ok } = apiCalls(c.apiUrl, c.adminToken);
  const connected = async () => new Set(((await ok('GET', '/v4/fulcrum/agents')).data as { id: string; connected: boolean }[]).filter((a) => a.connected).map((a) => a.id));
  const startAgent = async (a: StoreAgent) => {
    const metrics = new URL(a.metricsUrl);
    a.proc = watch(spawn(process.execPath, [join(repoRoot, 'bin', 'fulcrum.js'), 'agent', '--control-plane', c.grpcAddress, '--state', a.dir,
      '--runtime', 'process', '--node-pool', `${a.net}.0/24`, '--metrics-host', metrics.hostname, '--metrics-port', metrics.port, ...storeArgsOf(store!, o.archiveS)], {
      cwd: repoRoot, env: { ...process.env, FULCRUM_FROM_SOURCE: '1', FULCRUM_LOG_LEVEL: process.env.FULCRUM_LOG_LEVEL ?? 'info' }, stdio: ['ignore', 'pipe', 'pipe'],
    }));
    // From the TypeScript sources on a loaded machine: a start took over 30 s (docs/testing.md).
    await until(`agent ${a.id} connected`, async () => {
      if (a.proc!.proc.exitCode !== null) throw new Error(`agent ${a.id} exited: ${a.proc!.output().slice(-3000)}`);
      return (await connected()).has(a.id) || undefined;
    }, 180_000, 250);
  };
  const lab: StoreLab = {
    cp: c, dataplane: dataplane!, store: store!, reader: reader!, agents, api, ok, connected, startAgent,
    waitStatus: (id, status, timeoutMs = 600_000) => until(`database ${id} ${status}`, async () => {
      const r = await ok('GET', `${MYSQL}/${id}`);
      if (r.status === 'failed' && status !== 'failed') {
        const why = ((await ok('GET', '/v4/account/events?page_size=100')).data as { entity: { id: number } | null; status: string; message: string | null }[])
          .find((e) => e.entity?.id === id && e.status === 'failed');
        throw new Error(`database ${id} failed: ${why?.message ?? ''}`);
      }
      return r.status === status ? r : undefined;
    }, timeoutMs, 250),
    credentials: async (id) => ({
      password: (await ok('GET', `${MYSQL}/${id}/credentials`)).password as string,
      ca: Buffer.from((await ok('GET', `${MYSQL}/${id}/ssl`)).ca_certificate, 'base64').toString('utf8'),
    }),
    async metric(a, name) {
      const text = await (await fetch(a.metricsUrl)).text();
      const values = [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm'))].map((m) => Number(m[1]));
      if (values.length === 0) throw new Error(`agent ${a.id} has no metric ${name}`);
      return values.reduce((x, y) => x + y, 0);
    },
    storeFiles: () => readdirSync(store!.devicesDir, { recursive: true, withFileTypes: true }).filter((f) => f.isFile()).map((f) => join(f.parentPath, f.name)),
    storeFile(path) {
      try {
        return readFileSync(path);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
        throw err;
      }
    },
    explain: () => agents.map((a) => `[agent ${a.id}]\n${a.proc?.output().slice(-5000) ?? '(not started)'}`).join('\n'),
    close,
  };
  try {
    await Promise.all(agents.map(startAgent));
  } catch (err) {
    await close();
    throw err;
  }
  return lab;
}

/** The agent flags that point it at the store (docs/install.md). */
function storeArgsOf(store: ObjectStore, archiveS: number): string[] {
  return ['--backup-store', `s3://${store.bucket}/us-east`, '--backup-store-endpoint', store.endpoint, '--backup-store-region', store.region, '--backup-store-path-style',
    '--backup-store-ca', store.caFile, '--backup-store-credentials', store.credentialsFile, '--binlog-archive-interval', String(archiveS)];
}
