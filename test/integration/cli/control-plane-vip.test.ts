import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startControlPlane, type ControlPlane } from '../../../control-plane/main.js';
import { silentLogger } from '../../../lib/logger.js';
import { makeCa, makeCert } from '../../helpers/certs.js';
import { repoRoot } from '../../helpers/lab.js';

const dir = join(repoRoot, 'scripts', 'keepalived');
const check = join(dir, 'fulcrum-api-check.sh');

/** keepalived's own configuration check; returns what it reported (nothing: the file is valid). */
function keepalivedReport(conf: string, work: string): string {
  const file = join(work, 'keepalived.conf');
  writeFileSync(file, conf);
  const out = join(work, 'report');
  writeFileSync(out, '');
  spawnSync('keepalived', ['--config-test=' + out, '-f', file, '-p', join(work, 'k.pid'), '-r', join(work, 'v.pid'), '-c', join(work, 'c.pid')], { timeout: 30_000 });
  return readFileSync(out, 'utf8');
}

/** A child's exit code and what it wrote on stderr (curl's reason when the check fails). */
function exitAndStderr(child: ChildProcess): Promise<{ code: number | null; stderr: string }> {
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => { stderr += d.toString(); });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stderr }));
  });
}

/**
 * The one API address of docs/install.md ("One address for the API"): the keepalived file we ship
 * passes keepalived's configuration check, and the health check script it runs passes against a
 * live replica with a read-only token, and fails with a wrong token or with the replica gone.
 */
describe('the control-plane VIP (keepalived)', () => {
  const work = mkdtempSync(join(tmpdir(), 'harep-vip-'));
  let cp: ControlPlane | undefined;
  beforeAll(async () => {
    cp = await startControlPlane({ stateDir: join(work, 'cp'), apiPort: 0, grpcPort: 0, bootstrapPort: 0, logger: silentLogger() });
  });
  afterAll(async () => {
    await cp?.close();
    rmSync(work, { recursive: true, force: true });
  });

  it('ships a keepalived configuration keepalived accepts (and a broken one is reported)', () => {
    // The user must exist on this host; the script path is this checkout's.
    const conf = readFileSync(join(dir, 'control-plane-vip.conf'), 'utf8')
      .replace('/etc/keepalived/fulcrum-api-check.sh', check).replace('script_user fulcrum-check', 'script_user nobody');
    expect(keepalivedReport(conf, work)).toBe('');
    expect(keepalivedReport(conf.replace('virtual_router_id 52', 'virtual_router_id 520'), work)).toMatch(/520/);
  });

  it('its health check passes on a live replica with a read-only token, and fails otherwise', async () => {
    const admin = await cp!.context.auth.ensureAdmin();
    const { secret } = await cp!.context.auth.issueToken(admin.id, { label: 'vip-check', scopes: 'nodebalancers:read_only', expiry: null });
    const header = join(work, 'header');
    writeFileSync(header, `Authorization: Bearer ${secret}\n`, { mode: 0o600 });
    const apiUrl = cp!.apiUrl;
    // Asynchronously: the replica answering it runs in this process.
    const run = () => exitAndStderr(spawn('sh', [check], { env: { PATH: process.env.PATH, FULCRUM_API_URL: apiUrl, FULCRUM_CHECK_HEADER: header }, stdio: ['ignore', 'ignore', 'pipe'] }));
    expect(await run()).toEqual({ code: 0, stderr: '' });
    // As keepalived runs it: URL and header file as arguments, no variables.
    const byArgs = await new Promise<number | null>((resolve) => {
      const child = spawn('sh', [check, apiUrl, header], { env: { PATH: process.env.PATH }, stdio: 'ignore' });
      child.once('exit', (code) => resolve(code));
    });
    expect(byArgs).toBe(0);
    // Each failure for its own reason (curl's exit code says which): the API's refusal of the
    // token (22, an HTTP error), then no replica listening (7, no connection).
    writeFileSync(header, 'Authorization: Bearer not-a-token\n');
    const refused = await run();
    expect(refused.code).toBe(22);
    expect(refused.stderr).toMatch(/\b401\b/);
    writeFileSync(header, `Authorization: Bearer ${secret}\n`);
    expect(await run()).toEqual({ code: 0, stderr: '' });
    await cp!.close();
    cp = undefined;
    const down = await run();
    expect(down.code).toBe(7);
    expect(down.stderr).toMatch(/Failed to connect|Couldn't connect/);
  });

  it('checks an https API on this host by the name its certificate carries, verified against the CA given', async () => {
    // As the shipped line runs it: the API's name and port, the header file, the CA file. The
    // name resolves nowhere; the check connects to loopback and verifies the certificate.
    const name = 'api.vip-check.test';
    const ca = makeCa('VIP check CA');
    const leaf = makeCert(ca, name);
    const caFile = join(work, 'api-ca.crt');
    writeFileSync(caFile, ca.cert);
    const otherCa = join(work, 'other-ca.crt');
    writeFileSync(otherCa, makeCa('Some other CA').cert);
    const tlsCp = await startControlPlane({ stateDir: join(work, 'cp-tls'), apiHost: '127.0.0.1', apiPort: 0, grpcPort: 0, bootstrapPort: 0, apiTls: leaf, logger: silentLogger() });
    try {
      const admin = await tlsCp.context.auth.ensureAdmin();
      const { secret } = await tlsCp.context.auth.issueToken(admin.id, { label: 'vip-check', scopes: 'nodebalancers:read_only', expiry: null });
      const header = join(work, 'header-tls');
      writeFileSync(header, `Authorization: Bearer ${secret}\n`, { mode: 0o600 });
      const port = new URL(tlsCp.apiUrl).port;
      const run = (...args: string[]) => exitAndStderr(spawn('sh', [check, ...args], { env: { PATH: process.env.PATH }, stdio: ['ignore', 'ignore', 'pipe'] }));
      expect(await run(`https://${name}:${port}`, header, caFile)).toEqual({ code: 0, stderr: '' });
      // A certificate the check cannot verify fails it: not from the CA given, or not in the
      // system's trust store when no CA is given, or not naming the name asked for. Each for
      // that reason (curl's 60: the peer's certificate not verified), not a connection failure.
      for (const [url, caArg, reason] of [
        [`https://${name}:${port}`, [otherCa], /unable to get local issuer certificate|self[- ]signed certificate/],
        [`https://${name}:${port}`, [], /unable to get local issuer certificate|self[- ]signed certificate/],
        [`https://other.vip-check.test:${port}`, [caFile], /no alternative certificate subject name matches|does not match/],
      ] as const) {
        const failed = await run(url, header, ...caArg);
        expect(failed.code, url).toBe(60);
        expect(failed.stderr, url).toMatch(reason);
      }
    } finally {
      await tlsCp.close();
    }
  });
});
