import { afterAll, describe, expect, it } from 'vitest';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { api, runFulcrum, until } from '../../helpers/lab.js';

function exited(p: ChildProcess): Promise<{ code: number; err: string }> {
  let err = '';
  p.stderr!.on('data', (d) => (err += d));
  return new Promise((resolve) => p.on('exit', (code) => resolve({ code: code ?? -1, err })));
}

// `fulcrum control-plane|dataplane|agent --config FILE` (docs/install.md, "Config files").
describe('fulcrum --config', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ops-config-cli-'));
  const running: ChildProcess[] = [];
  afterAll(async () => {
    for (const p of running) {
      if (p.exitCode === null) {
        const gone = new Promise((r) => p.once('exit', r));
        p.kill('SIGTERM');
        await gone;
      }
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('starts a control plane from its file, with a command-line flag winning over the file', async () => {
    const state = join(dir, 'cp');
    const conf = join(dir, 'control-plane.conf');
    writeFileSync(conf, [
      '# the control plane of this test',
      `state = ${state}`,
      'api-host = 127.0.0.1',
      'api-port = 0',
      'grpc-port = 0',
      'bootstrap-port = 0',
      'api-rate-limit = 1000',
      '',
    ].join('\n'));
    chmodSync(conf, 0o644);
    const p = runFulcrum(['control-plane', '--config', conf, '--api-host', '127.0.0.2']);
    running.push(p);
    const info = await until('control-plane.json', () => {
      if (p.exitCode !== null) throw new Error(`exited ${p.exitCode}`);
      try {
        return JSON.parse(readFileSync(join(state, 'control-plane.json'), 'utf8')) as { apiUrl: string };
      } catch {
        return undefined;
      }
    }, 60_000, 100);
    expect(info.apiUrl).toMatch(/^http:\/\/127\.0\.0\.2:\d+$/);
    const token = readFileSync(join(state, 'admin-token'), 'utf8').trim();
    expect((await api(info.apiUrl, token)('GET', '/v4/regions')).status).toBe(200);
  });

  it('exits with the unknown key named', async () => {
    const conf = join(dir, 'typo.conf');
    writeFileSync(conf, `state = ${join(dir, 'dp')}\ncontrol-plane = 127.0.0.1:1\nmetrics-prot = 9100\n`);
    const r = await exited(runFulcrum(['dataplane', '--config', conf]));
    expect(r.code).toBe(2);
    expect(r.err).toContain(`--config ${conf} line 3: unknown key "metrics-prot"`);
  });

  it('refuses an agent file holding a join token that others can read', async () => {
    const conf = join(dir, 'agent.conf');
    writeFileSync(conf, `state = ${join(dir, 'agent')}\ncontrol-plane = 127.0.0.1:1\njoin = fulcrum1.8082.0123456789abcdef.${'b'.repeat(32)}.${'c'.repeat(64)}\n`);
    chmodSync(conf, 0o644);
    const r = await exited(runFulcrum(['agent', '--config', conf]));
    expect(r.code).toBe(2);
    expect(r.err).toContain('holds "join", a secret, but group or others may read it');
  });

  it('refuses the object store\'s secret key on the command line and a credentials file others may read', async () => {
    const secret = 'store-secret-not-for-ps';
    const onLine = await exited(runFulcrum(['agent', '--state', join(dir, 'agent-s3'), '--control-plane', '127.0.0.1:1', '--backup-store', 's3://bkt/p',
      '--backup-store-access-key-id', 'AK', `--backup-store-secret-access-key=${secret}`]));
    expect(onLine.code).toBe(2);
    expect(onLine.err).toContain('--backup-store-secret-access-key is read from the --config file');
    const creds = join(dir, 'store.json');
    writeFileSync(creds, JSON.stringify({ accessKeyId: 'AK', secretAccessKey: secret }));
    chmodSync(creds, 0o644);
    const open = await exited(runFulcrum(['agent', '--state', join(dir, 'agent-s3'), '--control-plane', '127.0.0.1:1', '--backup-store', 's3://bkt/p',
      '--backup-store-credentials', creds]));
    expect(open.code).toBe(2);
    expect(open.err).toContain(`--backup-store-credentials ${creds}: group or others may read or write it (chmod 600`);
    expect(onLine.err + open.err).not.toContain(secret);
  });
});
