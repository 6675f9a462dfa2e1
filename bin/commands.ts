/**
 * The per-process commands. Each starts one composition root, writes where it listens into its
 * state folder (so the lab and scripts can find it), and shuts down cleanly on SIGINT/SIGTERM.
 */
import { writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { parseFlags } from '../lib/args.js';
import { parseWireTime } from '../lib/clock.js';

function onShutdown(close: () => Promise<void>): void {
  let closing = false;
  const stop = (signal: string) => {
    if (closing) return;
    closing = true;
    const timer = setTimeout(() => process.exit(1), 15_000);
    timer.unref();
    close().then(
      () => process.exit(0),
      (err: Error) => {
        process.stderr.write(`error while stopping on ${signal}: ${err.message}\n`);
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

function required<T>(v: T | undefined, name: string): T {
  if (v === undefined) throw new Error(`--${name} is required`);
  return v;
}

export async function runControlPlaneCommand(argv: string[]): Promise<void> {
  const f = parseFlags(argv, {
    state: 'string', 'api-host': 'string', 'api-port': 'number', 'grpc-host': 'string', 'grpc-port': 'number',
    'nodebalancer-pool': 'string', 'database-pool': 'string', 'hostname-suffix': 'string', 'kek-file': 'string',
  });
  const { startControlPlane } = await import('../control-plane/main.js');
  const stateDir = required(f.state as string | undefined, 'state');
  const cp = await startControlPlane({
    stateDir,
    kekFile: f['kek-file'] as string | undefined,
    apiHost: f['api-host'] as string | undefined,
    apiPort: (f['api-port'] as number | undefined) ?? 8080,
    grpcHost: f['grpc-host'] as string | undefined,
    grpcPort: (f['grpc-port'] as number | undefined) ?? 8081,
    nodebalancerPool: f['nodebalancer-pool'] as string | undefined,
    databasePool: f['database-pool'] as string | undefined,
    hostnameSuffix: f['hostname-suffix'] as string | undefined,
  });
  writeFileSync(
    join(stateDir, 'control-plane.json'),
    JSON.stringify({ apiUrl: cp.apiUrl, grpcAddress: cp.grpcAddress, pid: process.pid }, null, 2),
  );
  onShutdown(() => cp.close());
}

export async function runDataplaneCommand(argv: string[]): Promise<void> {
  const f = parseFlags(argv, { id: 'string', region: 'string', 'control-plane': 'string', state: 'string', 'metrics-host': 'string', 'metrics-port': 'number' });
  const { startDataplane } = await import('../dataplane/main.js');
  const stateDir = required(f.state as string | undefined, 'state');
  mkdirSync(stateDir, { recursive: true });
  const dp = await startDataplane({
    id: (f.id as string | undefined) ?? 'dataplane-1',
    region: (f.region as string | undefined) ?? '*',
    controlPlane: required(f['control-plane'] as string | undefined, 'control-plane'),
    stateDir,
    metricsHost: f['metrics-host'] as string | undefined,
    metricsPort: f['metrics-port'] as number | undefined,
  });
  writeFileSync(join(stateDir, 'dataplane.json'), JSON.stringify({ pid: process.pid, metricsPort: dp.metricsPort ?? null }, null, 2));
  onShutdown(() => dp.close());
}

export async function runAgentCommand(argv: string[]): Promise<void> {
  const f = parseFlags(argv, {
    id: 'string', region: 'string', 'control-plane': 'string', state: 'string', runtime: 'string',
    'metrics-host': 'string', 'metrics-port': 'number', 'stop-nodes-on-exit': 'boolean', engines: 'string',
  });
  const runtime = (f.runtime as string | undefined) ?? 'process';
  if (runtime !== 'process' && runtime !== 'docker') throw new Error('--runtime must be process or docker');
  const { startAgent } = await import('../agent/main.js');
  const stateDir = required(f.state as string | undefined, 'state');
  const agent = await startAgent({
    id: (f.id as string | undefined) ?? 'agent-1',
    region: (f.region as string | undefined) ?? '*',
    controlPlane: required(f['control-plane'] as string | undefined, 'control-plane'),
    stateDir,
    runtime,
    enginesFile: f.engines as string | undefined,
    metricsHost: f['metrics-host'] as string | undefined,
    metricsPort: f['metrics-port'] as number | undefined,
  });
  writeFileSync(join(stateDir, 'agent.json'), JSON.stringify({ pid: process.pid }, null, 2));
  onShutdown(() => agent.close({ stopNodes: Boolean(f['stop-nodes-on-exit']) }));
}

export async function runTokenCreate(argv: string[]): Promise<void> {
  const f = parseFlags(argv, { state: 'string', label: 'string', scopes: 'string', expiry: 'string', user: 'string', restricted: 'boolean', grants: 'string', 'kek-file': 'string' });
  const stateDir = required(f.state as string | undefined, 'state');
  const { openDatabase } = await import('../control-plane/store/sqlite/database.js');
  const { sqliteTokens, sqliteUsers } = await import('../control-plane/store/sqlite/core-repositories.js');
  const { AuthService } = await import('../control-plane/domain/auth/auth-service.js');
  const { validateScopes } = await import('../control-plane/domain/auth/scopes.js');
  const { systemClock } = await import('../lib/clock.js');
  const db = openDatabase(join(stateDir, 'control-plane.sqlite'), { kekFile: f['kek-file'] as string | undefined });
  try {
    const users = sqliteUsers(db);
    const auth = new AuthService(users, sqliteTokens(db), systemClock);
    const scopes = (f.scopes as string | undefined) ?? '*';
    const bad = validateScopes(scopes);
    if (bad) throw new Error(bad);
    let expiry: number | null = null;
    if (f.expiry) {
      expiry = parseWireTime(f.expiry as string);
      if (Number.isNaN(expiry)) throw new Error('--expiry must look like 2030-01-01T00:00:00');
    }
    const username = (f.user as string | undefined) ?? 'admin';
    let user = users.byUsername(username);
    if (!user) {
      const global: Record<string, boolean> = {};
      for (const g of ((f.grants as string | undefined) ?? '').split(',').filter(Boolean)) global[g] = true;
      user = auth.createUser(username, Boolean(f.restricted), { global, nodebalancer: {}, database: {} });
    }
    const { secret } = auth.issueToken(user.id, { label: (f.label as string | undefined) ?? 'cli', scopes, expiry });
    process.stdout.write(`${secret}\n`);
  } finally {
    db.close();
  }
}

/** `fulcrum kek rotate`: a new key-encryption key for the control plane's secrets (docs/security/secrets.md). */
export async function runKekRotate(argv: string[]): Promise<void> {
  const f = parseFlags(argv, { state: 'string', 'kek-file': 'string' });
  const stateDir = required(f.state as string | undefined, 'state');
  const { rotateKek } = await import('../control-plane/store/sqlite/database.js');
  const r = rotateKek(join(stateDir, 'control-plane.sqlite'), { kekFile: f['kek-file'] as string | undefined });
  process.stdout.write(`key ${r.keyId} now seals every secret (${r.resealed} re-sealed)\n`);
}
