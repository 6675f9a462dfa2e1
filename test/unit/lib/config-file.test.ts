import { afterAll, describe, expect, it } from 'vitest';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { configFileArgs, parseFlagsWithConfig } from '../../../lib/config-file.js';

const spec = { state: 'string', 'grpc-port': 'number', 'insecure-grpc': 'boolean', join: 'string', 'control-plane': 'string' } as const;
const dir = mkdtempSync(join(tmpdir(), 'ops-config-unit-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function file(text: string, mode = 0o600): string {
  const p = join(dir, `c${n++}.conf`);
  writeFileSync(p, text);
  chmodSync(p, mode);
  return p;
}

describe('config files', () => {
  it('reads key = value lines, comments, quotes and booleans', () => {
    const p = file('# a data plane\nstate = /var/lib/fulcrum\n\ngrpc-port=8081\ninsecure-grpc = false\ncontrol-plane = "cp1:8081,cp2:8081"\n');
    expect(configFileArgs(p, spec)).toEqual(['--state=/var/lib/fulcrum', '--grpc-port=8081', '--insecure-grpc=false', '--control-plane=cp1:8081,cp2:8081']);
    expect(parseFlagsWithConfig(['--config', p], spec)).toEqual({ state: '/var/lib/fulcrum', 'grpc-port': 8081, 'insecure-grpc': false, 'control-plane': 'cp1:8081,cp2:8081' });
  });

  it('lets the command line win over the file, whichever side of --config it is on', () => {
    const p = file('state = /from/file\ngrpc-port = 1\n');
    expect(parseFlagsWithConfig(['--grpc-port', '2', '--config', p], spec)).toMatchObject({ state: '/from/file', 'grpc-port': 2 });
    expect(parseFlagsWithConfig([`--config=${p}`, '--state', '/from/flag'], spec)).toMatchObject({ state: '/from/flag', 'grpc-port': 1 });
    expect(parseFlagsWithConfig(['--state', '/only/flag'], spec)).toEqual({ state: '/only/flag' });
  });

  it('names the unknown key, the line and the file', () => {
    const p = file('state = /x\nstat = /y\n');
    expect(() => configFileArgs(p, spec)).toThrow(`--config ${p} line 2: unknown key "stat"`);
  });

  it('refuses a key twice, an empty value, a bad number or boolean, a line without =, and a nested config', () => {
    expect(() => configFileArgs(file('state = /a\nstate = /b\n'), spec)).toThrow(/line 2: "state" is set twice/);
    expect(() => configFileArgs(file('state =\n'), spec)).toThrow(/"state" has no value/);
    expect(() => configFileArgs(file('grpc-port = eighty\n'), spec)).toThrow(/line 1: --grpc-port must be a non-negative integer/);
    expect(() => configFileArgs(file('insecure-grpc = yes\n'), spec)).toThrow(/"insecure-grpc" must be true or false/);
    expect(() => configFileArgs(file('state /a\n'), spec)).toThrow(/line 1: expected key = value/);
    expect(() => configFileArgs(file('config = /etc/other\n'), spec)).toThrow(/cannot name another one/);
  });

  it('refuses a join token in a file others may read, and any file others may write', () => {
    const token = 'join = fulcrum1.8082.0123456789abcdef.0123456789abcdef0123456789abcdef.' + 'a'.repeat(64) + '\n';
    expect(() => configFileArgs(file(token, 0o644), spec)).toThrow(/holds "join", a secret, but group or others may read it/);
    expect(() => configFileArgs(file(token, 0o640), spec)).toThrow(/a secret/);
    expect(configFileArgs(file(token, 0o600), spec)).toHaveLength(1);
    // Paths are not secrets: a readable file without a token is fine.
    expect(configFileArgs(file('state = /x\n', 0o644), spec)).toEqual(['--state=/x']);
    expect(() => configFileArgs(file('state = /x\n', 0o646), spec)).toThrow(/writable by group or others/);
    expect(() => configFileArgs(file('state = /x\n', 0o620), spec)).toThrow(/writable by group or others/);
  });

  it('refuses the object store\'s secret key in a file others may read', () => {
    const s = { ...spec, 'backup-store-secret-access-key': 'string' } as const;
    expect(() => configFileArgs(file('backup-store-secret-access-key = abc123\n', 0o644), s)).toThrow(/holds "backup-store-secret-access-key", a secret, but group or others may read it/);
    expect(configFileArgs(file('backup-store-secret-access-key = abc123\n', 0o600), s)).toEqual(['--backup-store-secret-access-key=abc123']);
  });

  it('treats any URL with a user or password as a secret, whatever its key', () => {
    const url = (u: string) => `control-plane = ${u}\n`;
    expect(() => configFileArgs(file(url('postgres://fulcrum:pw@db:5432/f'), 0o644), spec))
      .toThrow(/holds "control-plane", a URL with a user or password in it, but group or others may read it/);
    expect(() => configFileArgs(file(url('postgres://fulcrum@db/f'), 0o640), spec)).toThrow(/a URL with a user or password/);
    expect(() => configFileArgs(file(url('https://u:p@[bad'), 0o644), spec)).toThrow(/a URL with a user or password/);
    expect(configFileArgs(file(url('postgres://fulcrum:pw@db/f'), 0o600), spec)).toHaveLength(1);
    // A URL without userinfo, or a plain address, is not a secret.
    expect(configFileArgs(file(url('postgres://db:5432/f?sslmode=require'), 0o644), spec)).toHaveLength(1);
    expect(configFileArgs(file(url('cp1:8081,cp2:8081'), 0o644), spec)).toHaveLength(1);
  });

  it('refuses a missing file and a folder', () => {
    expect(() => parseFlagsWithConfig(['--config', join(dir, 'absent.conf')], spec)).toThrow(/ENOENT/);
    expect(() => configFileArgs(dir, spec)).toThrow(/not a regular file/);
  });
});
