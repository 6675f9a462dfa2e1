import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../../control-plane/main.js';
import { grpc, loadConfigProto } from '../../../lib/grpc.js';
import { silentLogger } from '../../../lib/logger.js';
import type { ConfigAck } from '../../../proto/gen/fulcrum/v1/ConfigAck.js';
import type { ConfigSnapshot__Output } from '../../../proto/gen/fulcrum/v1/ConfigSnapshot.js';
import { startPgCluster, type PgCluster } from '../../helpers/postgres.js';

/**
 * Control-plane replicas in this process on one PostgreSQL database (docs/architecture.md,
 * "The store"), for the tests of what replicas share.
 */
export interface PgReplicas {
  /** The database every replica stores in (set once the file's first beforeAll ran). */
  readonly url: string;
  /** The one state folder every replica uses: they share the key file and the fleet CA, as docs/install.md says. */
  readonly stateDir: string;
  /** One more replica on that store, with plain gRPC; closed after the file unless closed first. */
  start(): Promise<ControlPlane>;
  /** Closes a replica `start` made before the file ends (closing one twice would fail). */
  close(cp: ControlPlane): Promise<void>;
}

/**
 * Registers the file's hooks: a private PostgreSQL cluster with one database and a state folder
 * named `<prefix>-state-*` before all tests; after them every replica still open is closed, then
 * the cluster stops and the folder goes. Call it before the file's own hooks: vitest runs
 * afterAll hooks in reverse order, so the file's (closing its hosts) run before these.
 */
export function usePgReplicas(prefix: string): PgReplicas {
  let cluster: PgCluster | undefined;
  const open: ControlPlane[] = [];
  // A random NodeBalancer pool per file: two files' replicas never hand out the same address.
  const pool = `127.${200 + Math.floor(Math.random() * 20)}.${1 + Math.floor(Math.random() * 250)}.0/24`;
  const replicas = {
    url: '',
    stateDir: '',
    async start() {
      const cp = await startControlPlane({ stateDir: replicas.stateDir, store: replicas.url, insecureGrpc: true, nodebalancerPool: pool, logger: silentLogger() });
      open.push(cp);
      return cp;
    },
    async close(cp: ControlPlane) {
      const i = open.indexOf(cp);
      if (i < 0) throw new Error('not an open replica of this file');
      open.splice(i, 1);
      await cp.close();
    },
  };
  beforeAll(async () => {
    cluster = await startPgCluster();
    replicas.url = await cluster.newDatabase();
    replicas.stateDir = mkdtempSync(join(tmpdir(), `${prefix}-state-`));
  }, 180_000);
  afterAll(async () => {
    for (const cp of open.splice(0)) await cp.close();
    await cluster?.stop();
    if (replicas.stateDir) rmSync(replicas.stateDir, { recursive: true, force: true });
  }, 60_000);
  return replicas;
}

/**
 * A scripted data plane on one replica's config stream: keeps every snapshot it gets and ACKs
 * it, and writes nothing else (no status refresh of its own).
 */
export function scriptedDataplane(address: string, id: string): { got: ConfigSnapshot__Output[]; close(): void } {
  const proto = loadConfigProto();
  const client = new proto.fulcrum.v1.ConfigService(address, grpc.credentials.createInsecure()) as any;
  const call = client.Stream() as grpc.ClientDuplexStream<ConfigAck, ConfigSnapshot__Output>;
  const got: ConfigSnapshot__Output[] = [];
  call.on('data', (s: ConfigSnapshot__Output) => {
    got.push(s);
    call.write({ dataplaneId: id, region: '*', versionApplied: s.version, responseNonce: s.nonce, errorDetail: '' });
  });
  call.on('error', () => undefined);
  call.write({ dataplaneId: id, region: '*', versionApplied: 0, responseNonce: '', incremental: false });
  return {
    got,
    close: () => {
      call.cancel();
      client.close();
    },
  };
}
