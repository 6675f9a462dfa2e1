import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createLocalBackupStorage, type BackupManifest } from '../../../agent/backup/backup-storage.js';
import { sealManifests } from '../../../agent/backup/sealed-manifest.js';

const KEY = Buffer.alloc(32, 7).toString('base64');
const OTHER = Buffer.alloc(32, 8).toString('base64');

const manifest = (id: number, label: string): BackupManifest => ({
  id, databaseId: 5, label, type: 'snapshot', target: 'primary', createdMs: 1000 + id, finishedMs: 2000 + id, engineVersion: '11.8.2',
  gtidPos: '0-1-9', snapshotGtid: '0-1-9', format: 'mariadb-dump+gzip+aes-256-gcm', file: 'dump.sql.gz.aes', sizeBytes: 10, sha256: 'ab', databases: ['tenant_schema_x'],
});

describe('backup manifests sealed for a store off the host', () => {
  let dir = '';
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('stores no label nor schema name in clear, reads them back with the key, and still reads a manifest from before sealing', async () => {
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-seal-'));
    for (const id of [1, 2, 3]) mkdirSync(join(dir, '5', String(id)), { recursive: true });
    const raw = createLocalBackupStorage(dir);
    let key: string | undefined = KEY;
    const sealed = sealManifests(raw, () => key);
    await sealed.commit(manifest(1, 'tenant_label_q'));
    const onDisk = readFileSync(join(dir, '5', '1', 'manifest.json'), 'utf8');
    expect(onDisk).not.toContain('tenant_label_q');
    expect(onDisk).not.toContain('tenant_schema_x');
    expect(JSON.parse(onDisk)).toMatchObject({ id: 1, databaseId: 5, label: '', databases: [], gtidPos: '0-1-9', sizeBytes: 10, sha256: 'ab' });
    // Written before sealing: plain fields, read as they are.
    await raw.commit(manifest(2, 'old_label'));
    const listed = await sealed.list(5);
    expect(listed.map((m) => [m.id, m.label, m.databases, m.sealed])).toEqual([[1, 'tenant_label_q', ['tenant_schema_x'], undefined], [2, 'old_label', ['tenant_schema_x'], undefined]]);
    // Without the key (or with another one) the manifest still counts, its sealed fields empty.
    key = OTHER;
    expect((await sealed.list(5)).map((m) => [m.id, m.label])).toEqual([[1, ''], [2, 'old_label']]);
    key = undefined;
    expect((await sealed.list(5)).map((m) => [m.id, m.label])).toEqual([[1, ''], [2, 'old_label']]);
    await expect(sealed.commit(manifest(3, 'x'))).rejects.toThrow(/no backup key/);
  });

  it('binds the sealed value to its manifest: copied into another backup it does not open', async () => {
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-seal-'));
    for (const id of [1, 2, 3]) mkdirSync(join(dir, '5', String(id)), { recursive: true });
    const raw = createLocalBackupStorage(dir);
    const sealed = sealManifests(raw, () => KEY);
    await sealed.commit(manifest(1, 'secret_one'));
    const one = JSON.parse(readFileSync(join(dir, '5', '1', 'manifest.json'), 'utf8')) as BackupManifest;
    await raw.commit({ ...manifest(2, ''), databases: [], sealed: one.sealed });
    expect((await sealed.list(5)).map((m) => [m.id, m.label])).toEqual([[1, 'secret_one'], [2, '']]);
  });
});
