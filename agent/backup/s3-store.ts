import { Agent } from 'node:https';
import { PassThrough, Writable, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import {
  AbortMultipartUploadCommand, DeleteObjectCommand, GetObjectCommand, HeadObjectCommand, ListMultipartUploadsCommand,
  ListObjectsV2Command, PutObjectCommand, S3Client,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import type { BackupManifest, BackupStorage } from './backup-storage.js';
import type { SegmentManifest, SegmentStorage } from '../binlog/segment-storage.js';
import type { S3StoreConfig } from './store-config.js';
import type { ReadLeases } from './read-lease.js';

/**
 * Parts of a multipart upload: 8 MiB, two in flight. What an upload holds in memory is about
 * (queue + 1) parts, whatever the dump's size; 10,000 parts (the S3 limit) make 80 GiB a file.
 */
export const PART_BYTES = 8 * 1024 * 1024;
const QUEUE = 2;
/** Requests in flight at once while removing a backup or a database, or reading new manifests. */
const DELETE_CONCURRENCY = 8;
const MANIFEST = 'manifest.json';

export { parseStoreUrl, loadStoreCredentials, type S3StoreConfig } from './store-config.js';

const isMissing = (err: unknown) => {
  const e = err as { name?: string; $metadata?: { httpStatusCode?: number } };
  return e?.name === 'NoSuchKey' || e?.name === 'NotFound' || e?.$metadata?.httpStatusCode === 404;
};

/** Runs fn over items, at most `n` at once. */
async function eachLimited<T>(items: T[], n: number, fn: (x: T) => Promise<void>): Promise<void> {
  let i = 0;
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, async () => {
    while (i < items.length) await fn(items[i++]!);
  }));
}

export interface S3Stores {
  backups: BackupStorage;
  segments: SegmentStorage;
  leases: ReadLeases;
  close(): void;
}

/**
 * The agent's backup store when it is an S3-compatible object store (docs/agent.md, "Backup
 * store"): one adapter behind both ports, backups and binlog segments. Object names are made of
 * numbers and fixed file names only (`PREFIX/db/<databaseId>/backups/<backupId>/<file>`,
 * `PREFIX/db/<databaseId>/binlog/<seq>/<file>`, read leases `PREFIX/db/<databaseId>/leases/fork-<id>.json`):
 * nothing a tenant wrote.
 */
export function createS3Stores(cfg: S3StoreConfig, o: { partBytes?: number } = {}): S3Stores {
  const client = new S3Client({
    region: cfg.region,
    ...(cfg.endpoint ? { endpoint: cfg.endpoint } : {}),
    forcePathStyle: cfg.pathStyle,
    credentials: cfg.credentials,
    // Our own SHA-256 of the stored bytes is the end-to-end check (the manifest, verified on
    // every restore and fork); the SDK's extra CRC trailers are not understood by every store.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    maxAttempts: 4,
    requestHandler: { httpsAgent: new Agent({ keepAlive: true, maxSockets: 16, ...(cfg.ca ? { ca: cfg.ca } : {}) }), connectionTimeout: 10_000, requestTimeout: 120_000 },
  });
  const Bucket = cfg.bucket;
  const partSize = o.partBytes ?? PART_BYTES;
  /** Keys this process is uploading now: a sweep for leftovers leaves them alone. */
  const uploading = new Set<string>();
  /** Manifests are written once: cached by key and ETag, so a list costs one LIST request. */
  const cache = new Map<string, { etag: string; body: unknown }>();

  async function keys(prefix: string): Promise<{ key: string; etag: string }[]> {
    const out: { key: string; etag: string }[] = [];
    let token: string | undefined;
    do {
      const r = await client.send(new ListObjectsV2Command({ Bucket, Prefix: prefix, ContinuationToken: token }));
      for (const x of r.Contents ?? []) if (x.Key) out.push({ key: x.Key, etag: x.ETag ?? '' });
      token = r.IsTruncated ? r.NextContinuationToken : undefined;
    } while (token);
    return out;
  }

  async function multipart(prefix: string): Promise<{ key: string; uploadId: string }[]> {
    const out: { key: string; uploadId: string }[] = [];
    let keyMarker: string | undefined;
    let idMarker: string | undefined;
    for (;;) {
      const r = await client.send(new ListMultipartUploadsCommand({ Bucket, Prefix: prefix, KeyMarker: keyMarker, UploadIdMarker: idMarker }));
      for (const u of r.Uploads ?? []) if (u.Key && u.UploadId) out.push({ key: u.Key, uploadId: u.UploadId });
      if (!r.IsTruncated) return out;
      keyMarker = r.NextKeyMarker;
      idMarker = r.NextUploadIdMarker;
    }
  }

  async function getText(key: string): Promise<string> {
    const r = await client.send(new GetObjectCommand({ Bucket, Key: key }));
    return r.Body!.transformToString('utf8');
  }

  /**
   * A stream into object `key`. It finishes only once the store has the whole object (so the
   * manifest, written after it, never names a missing file); an error aborts the multipart
   * upload, so nothing of it stays behind.
   */
  function writer(key: string): Writable {
    const body = new PassThrough({ highWaterMark: 1024 * 1024 });
    const upload = new Upload({ client, params: { Bucket, Key: key, Body: body }, partSize, queueSize: QUEUE, leavePartsOnError: false });
    uploading.add(key);
    const done = upload.done().finally(() => uploading.delete(key));
    done.catch(() => undefined);
    const w = new Writable({
      highWaterMark: 1024 * 1024,
      write(chunk: Buffer, _enc, cb) {
        if (body.write(chunk)) cb();
        else body.once('drain', () => cb());
      },
      final(cb) {
        body.end();
        done.then(() => cb(), (err: Error) => cb(err));
      },
      destroy(err, cb) {
        if (!w.writableFinished) {
          body.destroy();
          void upload.abort().catch(() => undefined);
        }
        cb(err);
      },
    });
    done.catch((err: Error) => {
      if (!w.writableFinished && !w.destroyed) w.destroy(new Error(`the backup store refused ${key}: ${err.message}`));
    });
    return w;
  }

  function reader(key: string): Readable {
    const out = new PassThrough();
    client.send(new GetObjectCommand({ Bucket, Key: key })).then(
      (r) => pipeline(r.Body as Readable, out).catch((err: Error) => out.destroy(err)),
      (err: Error) => out.destroy(isMissing(err) ? new Error(`${key} is not in the backup store`) : err),
    );
    return out;
  }

  async function put(key: string, body: string): Promise<void> {
    await client.send(new PutObjectCommand({ Bucket, Key: key, Body: body, ContentType: 'application/json' }));
  }

  async function del(key: string): Promise<void> {
    cache.delete(key);
    await client.send(new DeleteObjectCommand({ Bucket, Key: key }));
  }

  /**
   * Removes everything under `prefix`: the manifests first (from then on nothing there is
   * listed), then the data, then multipart uploads begun there and never finished.
   */
  async function removeUnder(prefix: string): Promise<void> {
    const all = await keys(prefix);
    const manifests = all.filter((x) => x.key.endsWith(`/${MANIFEST}`)).map((x) => x.key);
    await eachLimited(manifests, DELETE_CONCURRENCY, del);
    await eachLimited(all.map((x) => x.key).filter((k) => !manifests.includes(k)), DELETE_CONCURRENCY, del);
    await eachLimited(await multipart(prefix), DELETE_CONCURRENCY, async (u) => {
      await client.send(new AbortMultipartUploadCommand({ Bucket, Key: u.key, UploadId: u.uploadId })).catch((err) => {
        if (!isMissing(err)) throw err;
      });
    });
  }

  /** Manifests under `prefix` (`<prefix><n>/manifest.json`), parsed, whose number matches `idOf`. */
  async function manifests<T>(prefix: string, idOf: (m: T) => number): Promise<T[]> {
    const found: { n: number; body: T }[] = [];
    const re = new RegExp(`^${prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(\\d+)/${MANIFEST}$`);
    // Only manifests not seen before are read (a few at once: the first list after a start).
    await eachLimited(await keys(prefix), DELETE_CONCURRENCY, async (x) => {
      const m = re.exec(x.key);
      if (!m) return;
      try {
        let body = cache.get(x.key)?.etag === x.etag ? cache.get(x.key)!.body : undefined;
        if (body === undefined) {
          body = JSON.parse(await getText(x.key));
          cache.set(x.key, { etag: x.etag, body });
        }
        // A copy: callers own what list returns, as with the local adapter.
        if (idOf(body as T) === Number(m[1])) found.push({ n: Number(m[1]), body: structuredClone(body) as T });
      } catch (err) {
        // Removed between the list and the read, or unreadable: not listed (as locally).
        if (!isMissing(err) && !(err instanceof SyntaxError)) throw err;
      }
    });
    return found.sort((x, y) => x.n - y.n).map((x) => x.body);
  }

  /** Numbers under `prefix` with data or an unfinished upload but no manifest, not being written now. */
  async function unfinishedUnder(prefix: string): Promise<number[]> {
    const withData = new Set<number>();
    const done = new Set<number>();
    const idRe = new RegExp(`^${prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(\\d+)/(.+)$`);
    for (const x of await keys(prefix)) {
      const m = idRe.exec(x.key);
      if (!m) continue;
      if (m[2] === MANIFEST) done.add(Number(m[1]));
      else if (!uploading.has(x.key)) withData.add(Number(m[1]));
    }
    for (const u of await multipart(prefix)) {
      const m = idRe.exec(u.key);
      if (m && !uploading.has(u.key)) withData.add(Number(m[1]));
    }
    return [...withData].filter((n) => !done.has(n)).sort((a, b) => a - b);
  }

  const dbRoot = (db: number) => `${cfg.prefix}db/${db}/`;
  const b = (db: number, id?: number) => `${dbRoot(db)}backups/${id === undefined ? '' : `${id}/`}`;
  const s = (db: number, seq?: number) => `${dbRoot(db)}binlog/${seq === undefined ? '' : `${seq}/`}`;

  const backups: BackupStorage = {
    writer: async (db, id, file) => writer(`${b(db, id)}${file}`),
    commit: (m) => put(`${b(m.databaseId, m.id)}${MANIFEST}`, JSON.stringify(m)),
    list: async (db) => (await manifests<BackupManifest>(b(db), (m) => m.id)).sort((x, y) => x.createdMs - y.createdMs || x.id - y.id),
    reader: (db, id, file) => reader(`${b(db, id)}${file}`),
    size: async (db, id, file) => (await client.send(new HeadObjectCommand({ Bucket, Key: `${b(db, id)}${file}` }))).ContentLength ?? 0,
    remove: (db, id) => removeUnder(b(db, id)),
    withdraw: (db, id) => del(`${b(db, id)}${MANIFEST}`),
    unfinished: (db) => unfinishedUnder(b(db)),
    removeAll: (db) => removeUnder(dbRoot(db)),
  };
  const segments: SegmentStorage = {
    writer: async (db, seq, file) => writer(`${s(db, seq)}${file}`),
    commit: (m) => put(`${s(m.databaseId, m.seq)}${MANIFEST}`, JSON.stringify(m)),
    list: async (db) => (await manifests<SegmentManifest>(s(db), (m) => m.seq)).sort((x, y) => x.seq - y.seq),
    reader: (db, seq, file) => reader(`${s(db, seq)}${file}`),
    remove: (db, seq) => removeUnder(s(db, seq)),
    unfinished: (db) => unfinishedUnder(s(db)),
  };
  const l = (db: number) => `${dbRoot(db)}leases/`;
  const leases: ReadLeases = {
    hold: (db, holder, untilMs) => put(`${l(db)}${holder}.json`, JSON.stringify({ untilMs })),
    release: async (db, holder) => {
      await del(`${l(db)}${holder}.json`).catch((err) => {
        if (!isMissing(err)) throw err;
      });
    },
    list: async (db) => {
      const out: { holder: string; untilMs: number }[] = [];
      await eachLimited(await keys(l(db)), DELETE_CONCURRENCY, async (x) => {
        const m = /([^/]+)\.json$/.exec(x.key);
        if (!m) return;
        try {
          out.push({ holder: m[1]!, untilMs: Number((JSON.parse(await getText(x.key)) as { untilMs?: number }).untilMs ?? 0) });
        } catch (err) {
          // Released between the listing and the read.
          if (!isMissing(err) && !(err instanceof SyntaxError)) throw err;
        }
      });
      return out;
    },
  };
  return { backups, segments, leases, close: () => client.destroy() };
}
