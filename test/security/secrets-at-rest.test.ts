/**
 * Attack (docs/security/secrets.md, "Secrets at rest"): another local user, or anyone holding a
 * copy of the control plane's SQLite file, reads the state folders. Before the fix the folders
 * were 0755 and the files 0644, and the store held every root password, pending reset password
 * and NodeBalancer TLS key in plain text. Now every file under every state folder is owner-only,
 * and the store (main file, WAL and shared memory) holds those secrets only sealed under a key
 * file; `fulcrum kek rotate` re-seals them under a new key and the API still returns them; a store
 * written by an earlier version (plain values, open modes) is sealed and made private on start.
 */
import { execFileSync } from 'node:child_process';
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../control-plane/main.js';
import { startDataplane, type Dataplane } from '../../dataplane/main.js';
import { openDatabase } from '../../control-plane/store/sqlite/database.js';
import { sqliteNodeBalancers } from '../../control-plane/store/sqlite/nodebalancer-repository.js';
import { createProcessRuntime } from '../../agent/runtime/process-runtime.js';
import { silentLogger } from '../../lib/logger.js';
import { makeCa, makeCert, type Pem } from '../helpers/certs.js';
import { api, repoRoot, runFulcrum, startLab, until, type RunningLab } from '../helpers/lab.js';
import { enrolHost } from '../helpers/fleet.js';
import { testBackendNetworks } from '../helpers/api-harness.js';

const MYSQL = '/v4/databases/mysql/instances';

/** The gid of the group database servers run in (docs/security/mysql.md), when it exists. */
function nodeGroupGid(): number | undefined {
  try {
    return Number(execFileSync('getent', ['group', 'fulcrum-db'], { encoding: 'utf8' }).split(':')[2]);
  } catch {
    return undefined;
  }
}

/**
 * Every path under `dir` (symbolic links not followed) whose mode gives group or other any bit.
 * The one exception: a folder the agent shares with its database servers' group keeps group
 * search only (reach a known path inside, list and read nothing).
 */
function openToOthers(dir: string): string[] {
  const bad: string[] = [];
  const shared = nodeGroupGid();
  const walk = (p: string) => {
    let st;
    try {
      st = lstatSync(p);
    } catch {
      return; // vanished while walking
    }
    // A socket is not read: what guards it is its folder, which is checked like every other.
    if (st.isSymbolicLink() || st.isSocket()) return;
    const searchOnly = st.isDirectory() && shared !== undefined && st.gid === shared && (st.mode & 0o077) === 0o010;
    if ((st.mode & 0o077) !== 0 && !searchOnly) bad.push(`${p} ${(st.mode & 0o777).toString(8)}`);
    if (st.isDirectory()) for (const n of readdirSync(p)) walk(join(p, n));
  };
  walk(dir);
  return bad;
}

/** The store's main file, WAL and shared memory, as they are named on disk. */
function storeFiles(cpDir: string): string[] {
  const base = join(cpDir, 'control-plane.sqlite');
  return [base, `${base}-wal`, `${base}-shm`];
}

/**
 * Files' bytes, read by a child process (`cat`), never by this one. The control plane runs in this
 * process with the store open, and SQLite's locks are POSIX record locks, which belong to the
 * process: closing any descriptor of a file (as readFileSync does) drops every lock the process
 * holds on it, without SQLite knowing. With its locks gone, `fulcrum kek rotate` took itself for
 * the store's only user and, on closing, deleted the WAL and shared-memory files the control plane
 * still had open; the control plane then wrote into deleted files and the next connection in this
 * process failed with `disk I/O error` (docs/security/secrets.md, "Rotation").
 */
function bytesOf(files: string[]): Buffer {
  const present = files.filter(existsSync);
  return present.length === 0 ? Buffer.alloc(0) : execFileSync('cat', ['--', ...present], { maxBuffer: 1 << 30 });
}

/** The store's bytes: main file, WAL and shared memory, as they are on disk right now. */
const storeBytes = (cpDir: string): Buffer => bytesOf(storeFiles(cpDir));

/** Inode numbers of the store's files: which files they are, not just their names. */
const storeInodes = (cpDir: string): (number | undefined)[] =>
  storeFiles(cpDir).map((f) => (existsSync(f) ? lstatSync(f).ino : undefined));

/** A line from the middle of a PEM body: unique to this key, and what a thief would search for. */
const keyBody = (pem: Pem) => pem.key.split('\n').filter((l) => l && !l.startsWith('-----'))[5]!;

function runCli(args: string[]): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    const p = runFulcrum(args);
    let out = '';
    p.stdout!.on('data', (d) => (out += d));
    p.stderr!.on('data', (d) => (out += d));
    p.on('exit', (code) => resolve({ code: code ?? -1, out }));
  });
}

describe('security: secrets at rest (control plane, data plane and agent)', () => {
  const octet = 100 + Math.floor(Math.random() * 150);
  const root = mkdtempSync(join(tmpdir(), 'fulcrum-secrets-at-rest-'));
  const dirs = { cp: join(root, 'cp'), dp: join(root, 'dp'), agent: join(root, 'agent') };
  const pem = makeCert(makeCa(), 'secret.example');
  let cp: ControlPlane;
  let dp: Dataplane;
  let agent: ChildProcess | undefined;
  let call: ReturnType<typeof api>;
  let dbId: number;
  let password: string;

  const startCp = async () => {
    cp = await startControlPlane({
      stateDir: dirs.cp, apiPort: 0, grpcPort: 0, logger: silentLogger(), backendNetworks: testBackendNetworks,
      databasePool: `127.78.${octet}.0/24`, nodebalancerPool: `127.77.${octet}.0/24`,
    });
    call = api(cp.apiUrl, cp.adminToken);
  };

  beforeAll(async () => {
    await startCp();
    // Both hosts hold certificates from the control plane's CA, as a join leaves them.
    await enrolHost(cp, dirs.dp, 'dataplane', 'secrets-dp', '*');
    await enrolHost(cp, dirs.agent, 'agent', 'secrets-agent', 'us-east');
    dp = await startDataplane({ id: 'secrets-dp', region: '*', controlPlane: cp.grpcAddress, stateDir: dirs.dp, logger: silentLogger() });
    agent = spawn(process.execPath, ['--import', 'tsx', join(repoRoot, 'test', 'e2e', 'databases', 'agent-process.ts'), 'secrets-agent', 'us-east',
      cp.grpcAddress, dirs.agent, 'process', `127.79.${octet}.0/24`], { cwd: repoRoot, env: { ...process.env, FULCRUM_LOG_LEVEL: 'warn' }, stdio: 'ignore' });
    const engine = await until('agent engine', async () => (await call('GET', '/v4/fulcrum/agents')).body.data.find((a: any) => a.connected)?.engines[0]?.id, 30_000, 200);

    const nb = await call('POST', '/v4/nodebalancers', {
      region: 'us-east', label: 'secrets-nb',
      configs: [{ port: 443, protocol: 'https', ssl_cert: pem.cert, ssl_key: pem.key, nodes: [{ address: `127.0.9.1:80`, label: 'web' }] }],
    });
    expect(nb.status, JSON.stringify(nb.body)).toBe(200);
    const created = await call('POST', MYSQL, { label: 'secrets-db', region: 'us-east', type: 'g6-nanode-1', engine, allow_list: [] });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    dbId = created.body.id;
    await until('database active', async () => (await call('GET', `${MYSQL}/${dbId}`)).body.status === 'active', 90_000, 200);
    password = (await call('GET', `${MYSQL}/${dbId}/credentials`)).body.password;
    expect(password).toMatch(/.{16,}/);
    // The data plane persisted the snapshot with the key; the agent its desired state.
    await until('data plane persisted', () => readdirSync(dirs.dp).some((f) => f.startsWith('dataplane-')), 20_000);
    await until('agent persisted', () => existsSync(join(dirs.agent, 'desired.json')), 20_000);
  });

  afterAll(async () => {
    if (agent && agent.exitCode === null) {
      const exited = new Promise((r) => agent!.once('exit', r));
      agent.kill('SIGKILL');
      await exited;
    }
    const rt = createProcessRuntime({ root: join(dirs.agent, 'runtime'), logger: silentLogger() });
    for (const n of await rt.list({})) await rt.remove(n.name, { withData: true });
    await rt.close();
    await dp?.close();
    await cp?.close();
    rmSync(root, { recursive: true, force: true });
  });

  it('the store holds no password or TLS key in plain text (main file, WAL, shared memory)', () => {
    const bytes = storeBytes(dirs.cp);
    expect(bytes.includes(password)).toBe(false);
    expect(bytes.includes(keyBody(pem))).toBe(false);
    expect(bytes.includes('PRIVATE KEY')).toBe(false);
    expect(bytes.includes('fkek1:')).toBe(true);
  });

  it('no file under the control plane, data plane or agent state folder is open to other users', () => {
    // The probe finds a file open to others where there is one, and walks folders that exist and
    // hold files: an empty answer is not the probe missing them.
    const control = mkdtempSync(join(tmpdir(), 'negassert-open-'));
    try {
      writeFileSync(join(control, 'f'), 'x');
      chmodSync(join(control, 'f'), 0o644);
      expect(openToOthers(control)).toEqual([`${join(control, 'f')} 644`]);
    } finally {
      rmSync(control, { recursive: true, force: true });
    }
    for (const d of Object.values(dirs)) {
      expect(readdirSync(d).length, d).toBeGreaterThan(0);
      expect(openToOthers(d), d).toEqual([]);
    }
  });

  it('a pending reset password is sealed too', async () => {
    expect((await call('POST', `${MYSQL}/${dbId}/credentials/reset`)).status).toBe(200);
    const next = await until('new password', async () => {
      const p = (await call('GET', `${MYSQL}/${dbId}/credentials`)).body.password;
      return p !== password ? p : undefined;
    }, 60_000, 200);
    const bytes = storeBytes(dirs.cp);
    expect(bytes.includes('fkek1:')).toBe(true);
    expect(bytes.includes(next)).toBe(false);
    expect(bytes.includes(password)).toBe(false);
    password = next;
  });

  it('fulcrum kek rotate re-seals every secret under a new key while the control plane runs; the API returns the same secrets', async () => {
    const kek = join(dirs.cp, 'keys', 'kek');
    const before = readFileSync(kek, 'utf8').split('\n').filter((l) => l && !l.startsWith('#'));
    expect(before).toHaveLength(1);
    // The running control plane holds the store's WAL and shared memory open: the rotation must
    // share them, never delete or replace them under it (it would, were it to take itself for the
    // store's only user: then the control plane writes into deleted files).
    const held = storeInodes(dirs.cp);
    expect(held.every((ino) => ino !== undefined), JSON.stringify(held)).toBe(true);
    const r = await runCli(['kek', 'rotate', '--state', dirs.cp]);
    expect(r.code, r.out).toBe(0);
    expect(storeInodes(dirs.cp)).toEqual(held);
    const after = readFileSync(kek, 'utf8').split('\n').filter((l) => l && !l.startsWith('#'));
    expect(after).toHaveLength(1);
    const newId = after[0]!.split(' ')[0]!;
    expect(newId).not.toBe(before[0]!.split(' ')[0]);
    expect(r.out).toContain(`key ${newId}`);

    const raw = new Database(join(dirs.cp, 'control-plane.sqlite'), { readonly: true });
    const sealed = [
      raw.prepare('SELECT root_password FROM databases').pluck().get() as string,
      raw.prepare('SELECT ssl_key FROM nb_configs').pluck().get() as string,
    ];
    raw.close();
    for (const v of sealed) expect(v.startsWith(`fkek1:${newId}:`)).toBe(true);
    expect((await call('GET', `${MYSQL}/${dbId}/credentials`)).body.password).toBe(password);

    // After a restart the key file alone opens the store: same password, same TLS key.
    await cp.close();
    await startCp();
    expect((await call('GET', `${MYSQL}/${dbId}/credentials`)).body.password).toBe(password);
    const store = openDatabase(join(dirs.cp, 'control-plane.sqlite'));
    try {
      const nbs = sqliteNodeBalancers(store);
      expect((await nbs.configs((await nbs.list())[0]!.id))[0]!.sslKey).toBe(pem.key);
    } finally {
      store.close();
    }
    expect(storeBytes(dirs.cp).includes(keyBody(pem))).toBe(false);
  });

  it('a store and folder left by an earlier version (plain values, open modes) are sealed and made private on start', async () => {
    await cp.close();
    const file = join(dirs.cp, 'control-plane.sqlite');
    const legacy = 'Legacy.Plain_Pass_77';
    const raw = new Database(file);
    raw.prepare('UPDATE databases SET root_password = ?').run(legacy);
    raw.prepare('UPDATE nb_configs SET ssl_key = ?').run(pem.key);
    raw.close();
    expect(bytesOf([file]).includes(legacy)).toBe(true);
    chmodSync(dirs.cp, 0o755);
    chmodSync(file, 0o644);
    chmodSync(join(dirs.cp, 'keys'), 0o755);

    await startCp();
    expect((await call('GET', `${MYSQL}/${dbId}/credentials`)).body.password).toBe(legacy);
    const bytes = storeBytes(dirs.cp);
    expect(bytes.includes(legacy)).toBe(false);
    expect(bytes.includes(keyBody(pem))).toBe(false);
    expect(openToOthers(dirs.cp)).toEqual([]);
  });
});

describe('security: the lab state folder is private', () => {
  let lab: RunningLab;
  const pem = makeCert(makeCa(), 'lab-secret.example');

  beforeAll(async () => {
    lab = await startLab();
  });
  afterAll(async () => {
    await lab?.stop();
    if (!lab) return;
    // A server the agent was still preparing (a template data folder) may be finishing its last
    // writes as the lab stops: try again for a few seconds rather than fail the suite on cleanup.
    for (let i = 0; ; i++) {
      try {
        rmSync(lab.info.stateDir, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
        return;
      } catch (err) {
        if (i === 10) throw err;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  });

  it('lab.json, logs, and every process folder are owner-only; the lab store seals TLS keys', async () => {
    const call = api(lab.info.apiUrl, lab.info.adminToken);
    const nb = await call('POST', '/v4/nodebalancers', {
      region: 'us-east', label: 'lab-secrets-nb',
      configs: [{ port: 443, protocol: 'https', ssl_cert: pem.cert, ssl_key: pem.key, nodes: [{ address: '127.0.9.2:80', label: 'web' }] }],
    });
    expect(nb.status, JSON.stringify(nb.body)).toBe(200);
    // Let every process write what it writes (logs, persisted snapshot, desired state).
    await new Promise((r) => setTimeout(r, 1500));
    expect(readdirSync(lab.info.stateDir).length).toBeGreaterThan(0);
    expect(openToOthers(lab.info.stateDir)).toEqual([]);
    // The probe reads the lab's store (sealed values are in it): the key's absence means something.
    const bytes = storeBytes(join(lab.info.stateDir, 'control-plane'));
    expect(bytes.includes('fkek1:')).toBe(true);
    expect(bytes.includes(keyBody(pem))).toBe(false);
  });
});
