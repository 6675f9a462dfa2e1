import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadOrCreateKeyFile, newKey, parseKeyFile, SecretBox, writeKeyFile } from '../../../lib/secret-box.js';

describe('secret box (envelope encryption of secrets at rest)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fulcrum-secret-box-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('seals with the active key, names it, and opens back; plain values pass through', () => {
    const k = newKey();
    const box = new SecretBox([k]);
    const sealed = box.seal('S3cret.Pass', 'databases.root_password');
    expect(sealed).toMatch(new RegExp(`^fkek1:${k.id}:`));
    expect(sealed).not.toContain('S3cret');
    expect(box.seal('S3cret.Pass', 'databases.root_password')).not.toBe(sealed);
    expect(box.open(sealed, 'databases.root_password')).toBe('S3cret.Pass');
    expect(box.open('legacy-plain', 'databases.root_password')).toBe('legacy-plain');
    expect(box.openNullable(null, 'x')).toBeNull();
    expect(box.sealNullable(undefined, 'x')).toBeNull();
  });

  it('a value moved to another column, altered, or under an unknown key does not open', () => {
    const box = new SecretBox([newKey()]);
    const sealed = box.seal('k', 'nb_configs.ssl_key');
    expect(() => box.open(sealed, 'databases.root_password')).toThrow(/does not open for databases.root_password/);
    const bytes = Buffer.from(sealed.split(':')[2]!, 'base64');
    bytes[14] ^= 1;
    expect(() => box.open(`fkek1:${sealed.split(':')[1]}:${bytes.toString('base64')}`, 'nb_configs.ssl_key')).toThrow(/does not open/);
    expect(() => new SecretBox([newKey()]).open(sealed, 'nb_configs.ssl_key')).toThrow(/not in the key file/);
  });

  it('key file: created 0600 in a 0700 folder, last key active, re-read when it changes', () => {
    const file = join(dir, 'keys', 'kek');
    const box = loadOrCreateKeyFile(file);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(statSync(join(dir, 'keys')).mode & 0o777).toBe(0o700);
    const first = box.activeId;
    const old = box.seal('v', 'c');
    const next = newKey();
    writeKeyFile(file, [...parseKeyFile(readFileSync(file, 'utf8'), file), next]);
    // A value sealed elsewhere with the new key opens; new values use it.
    expect(box.open(new SecretBox([next]).seal('w', 'c'), 'c')).toBe('w');
    expect(box.activeId).toBe(next.id);
    expect(box.open(old, 'c')).toBe('v');
    expect(first).not.toBe(next.id);
    expect(() => parseKeyFile('abc notbase64', 'f')).toThrow(/f:1: expected/);
  });
});
