// integration-lane: concurrent (startObjectStore: its own temp folder, free ports on 127.83.0.1, its own CA).
/**
 * The S3 adapter (agent/backup/s3-store.ts) against a real S3-compatible store (Swift + s3api
 * over TLS): a multipart upload listed only once its manifest is written, read back with its
 * checksum, a changed object refused by the restore's verification, an upload abandoned midway
 * (parts in the store, no manifest) never listed and swept, removal counted in the store, a
 * withdrawn backup (its manifest deleted, its data left for a fork reading it), and
 * credential files others may read refused.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import { Agent } from 'node:https';
import { ListMultipartUploadsCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createS3Stores, loadStoreCredentials, parseStoreUrl, type S3Stores } from '../../../agent/backup/s3-store.js';
import { sealedWriter } from '../../../agent/backup/sealed-writer.js';
import { createBackupService } from '../../../agent/backup/backup-service.js';
import type { BackupManifest } from '../../../agent/backup/backup-storage.js';
import { createLogger } from '../../../lib/logger.js';
import { ManualClock } from '../../../lib/clock.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';
import { startObjectStore, type ObjectStore } from '../../helpers/object-store.js';

/** The smallest part S3 (and Swift's s3api) accepts: 6 MiB of data make a 2-part upload. */
const PART = 5 * 1024 * 1024;

describe('backup store: S3 adapter against Swift s3api', () => {
  let store: ObjectStore;
  let stores: S3Stores;
  let raw: S3Client;
  const open = () => createS3Stores({
    bucket: store.bucket, prefix: 'fleet-a/', endpoint: store.endpoint, region: store.region, pathStyle: true, ca: store.ca,
    credentials: loadStoreCredentials(store.credentialsFile),
  }, { partBytes: PART });
  const objects = async (prefix: string) => ((await raw.send(new ListObjectsV2Command({ Bucket: store.bucket, Prefix: prefix }))).Contents ?? []).map((x) => x.Key!);
  const uploads = async (prefix: string) => ((await raw.send(new ListMultipartUploadsCommand({ Bucket: store.bucket, Prefix: prefix }))).Uploads ?? []).length;

  beforeAll(async () => {
    store = await startObjectStore({ host: '127.83.0.1' });
    stores = open();
    raw = new S3Client({
      endpoint: store.endpoint, region: store.region, forcePathStyle: true, credentials: { accessKeyId: store.accessKeyId, secretAccessKey: store.secretAccessKey },
      requestHandler: { httpsAgent: new Agent({ ca: store.ca }) }, requestChecksumCalculation: 'WHEN_REQUIRED', responseChecksumValidation: 'WHEN_REQUIRED',
    });
  }, 180_000);

  afterAll(async () => {
    stores?.close();
    raw?.destroy();
    await store?.stop();
  });

  /** Writes `data` as backup `id` of database 7 the way the backup service does; returns the manifest, not committed. */
  async function write(id: number, data: Buffer): Promise<BackupManifest> {
    const sealed = sealedWriter(await stores.backups.writer(7, id, 'dump.sql.gz'), { level: 0 });
    await pipeline(Readable.from([data]), sealed.input);
    const { sizeBytes, sha256 } = await sealed.done;
    return {
      id, databaseId: 7, label: 'l', type: 'snapshot', target: 'primary', createdMs: id, finishedMs: id, engineVersion: '10.11',
      gtidPos: '', format: 'mariadb-dump+gzip', file: 'dump.sql.gz', sizeBytes, sha256, databases: [],
    };
  }

  it('a multipart upload is listed only after its manifest, reads back whole, and a changed object is refused', async () => {
    const data = randomBytes(PART + 1024 * 1024);
    const m = await write(1, data);
    expect(await objects('fleet-a/db/7/backups/1/')).toEqual(['fleet-a/db/7/backups/1/dump.sql.gz']);
    expect(await stores.backups.list(7)).toEqual([]);
    expect(await stores.backups.unfinished(7)).toEqual([1]);
    await stores.backups.commit(m);
    expect(await stores.backups.list(7)).toEqual([m]);
    expect(await stores.backups.unfinished(7)).toEqual([]);
    expect(await stores.backups.size(7, 1, 'dump.sql.gz')).toBe(m.sizeBytes);

    const service = createBackupService({ storage: stores.backups, runtime: {} as ContainerRuntime, logger: createLogger('test', { level: 'silent' }), clock: new ManualClock(0) });
    await service.verify(m);
    // The store's operator (or a fault) changes the object: restore and fork verification refuse it.
    await raw.send(new PutObjectCommand({ Bucket: store.bucket, Key: 'fleet-a/db/7/backups/1/dump.sql.gz', Body: randomBytes(1000) }));
    await expect(service.verify(m)).rejects.toThrow(/backup 1 is corrupted: its checksum is/);
  });

  it('an upload abandoned midway (its process gone) is never listed, and the sweep removes its parts', async () => {
    const dead = open();
    const w = await dead.backups.writer(7, 2, 'dump.sql.gz');
    // More than one part, never ended: the store holds a multipart upload with parts and no object.
    w.write(randomBytes(PART + 4096));
    await new Promise<void>((resolve, reject) => {
      const deadline = Date.now() + 60_000;
      const poll = () => uploads('fleet-a/db/7/backups/2/').then((n) => (n > 0 ? resolve() : Date.now() > deadline ? reject(new Error('no multipart upload')) : setTimeout(poll, 200)), reject);
      poll();
    });
    expect((await stores.backups.list(7)).map((x) => x.id)).not.toContain(2);
    expect(await stores.backups.unfinished(7)).toEqual([2]);
    await stores.backups.remove(7, 2);
    expect(await uploads('fleet-a/db/7/backups/2/')).toBe(0);
    expect(await stores.backups.unfinished(7)).toEqual([]);
    w.on('error', () => undefined);
    dead.close();
  });

  it('segments share the layout; removing a backup, a segment and a whole database deletes their objects', async () => {
    const sealed = sealedWriter(await stores.segments.writer(7, 1, 'binlog.gz'), { level: 1 });
    sealed.input.end(Buffer.from('binlog bytes'));
    const { sizeBytes, sha256 } = await sealed.done;
    expect(await stores.segments.unfinished(7)).toEqual([1]);
    await stores.segments.commit({ databaseId: 7, seq: 1, gtidStart: '0-1-1', gtidEnd: '0-1-5', closedMs: 1, sourceFile: 'b.000001', node: 1, format: 'binlog+gzip', file: 'binlog.gz', sizeBytes, sha256 });
    expect((await stores.segments.list(7)).map((x) => x.seq)).toEqual([1]);
    await stores.backups.commit(await write(3, Buffer.from('small')));
    expect(await objects('fleet-a/db/7/')).toHaveLength(6);

    await stores.backups.remove(7, 3);
    expect(await objects('fleet-a/db/7/backups/3/')).toEqual([]);
    await stores.segments.remove(7, 1);
    expect(await stores.segments.list(7)).toEqual([]);
    await stores.backups.removeAll(7);
    expect(await objects('fleet-a/db/7/')).toEqual([]);
    expect(await stores.backups.list(7)).toEqual([]);
  });

  it('withdrawing a backup (deleted while a fork reads it) deletes its manifest only: listed nowhere, its data still verifies, then remove takes it', async () => {
    const m = await write(4, Buffer.from('read by a fork'));
    await stores.backups.commit(m);
    await stores.backups.withdraw(7, 4);
    await stores.backups.withdraw(7, 4);
    expect((await stores.backups.list(7)).map((x) => x.id)).not.toContain(4);
    expect(await objects('fleet-a/db/7/backups/4/')).toEqual(['fleet-a/db/7/backups/4/dump.sql.gz']);
    const service = createBackupService({ storage: stores.backups, runtime: {} as ContainerRuntime, logger: createLogger('test', { level: 'silent' }), clock: new ManualClock(0) });
    await service.verify(m);
    await stores.backups.remove(7, 4);
    expect(await objects('fleet-a/db/7/backups/4/')).toEqual([]);
  });

  it('store URLs and credential files are checked', () => {
    expect(parseStoreUrl('s3://backups-eu/fleet/a/')).toEqual({ bucket: 'backups-eu', prefix: 'fleet/a/' });
    expect(parseStoreUrl('s3://backups-eu')).toEqual({ bucket: 'backups-eu', prefix: '' });
    expect(() => parseStoreUrl('https://x/y')).toThrow(/s3:\/\/BUCKET/);
    const dir = mkdtempSync(join(tmpdir(), 's3-creds-'));
    const f = join(dir, 'c.json');
    writeFileSync(f, JSON.stringify({ accessKeyId: 'AK', secretAccessKey: 'very-secret-value' }), { mode: 0o600 });
    expect(loadStoreCredentials(f).accessKeyId).toBe('AK');
    chmodSync(f, 0o644);
    let msg = '';
    try {
      loadStoreCredentials(f);
    } catch (err) {
      msg = (err as Error).message;
    }
    expect(msg).toMatch(/chmod 600/);
    expect(msg).not.toContain('very-secret-value');
  });
});
