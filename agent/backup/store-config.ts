import { readFileSync, statSync } from 'node:fs';

// The backup store's settings as the agent's flags give them (docs/install.md, "Backup store"):
// kept apart from s3-store.ts so that parsing flags loads no S3 client.

/** `s3://BUCKET/PREFIX` → bucket and prefix ('' or ending in '/'). */
export function parseStoreUrl(url: string): { bucket: string; prefix: string } {
  const m = /^s3:\/\/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:\/(.*))?$/.exec(url);
  if (!m) throw new Error('--backup-store must be s3://BUCKET or s3://BUCKET/PREFIX (a bucket name of 3-63 lowercase letters, digits, dots and dashes)');
  const prefix = (m[2] ?? '').replace(/^\/+|\/+$/g, '');
  if (prefix !== '' && !/^[A-Za-z0-9._/-]{1,200}$/.test(prefix)) throw new Error('--backup-store: the prefix may hold only letters, digits, dots, dashes, underscores and slashes');
  return { bucket: m[1]!, prefix: prefix === '' ? '' : `${prefix}/` };
}

/**
 * Reads the store's keys from a JSON file `{ "accessKeyId": ..., "secretAccessKey": ... }`,
 * refused unless only its owner may read it (a key readable by others is a leaked key).
 * The error messages never quote the file's content.
 */
export function loadStoreCredentials(path: string): { accessKeyId: string; secretAccessKey: string } {
  const st = statSync(path);
  if (!st.isFile()) throw new Error(`--backup-store-credentials ${path}: not a regular file`);
  if ((st.mode & 0o077) !== 0) throw new Error(`--backup-store-credentials ${path}: group or others may read or write it (chmod 600 ${path})`);
  if (st.size > 64 * 1024) throw new Error(`--backup-store-credentials ${path}: larger than 64 KiB`);
  let v: unknown;
  try {
    v = JSON.parse(readFileSync(path, 'utf8'));
  } catch {
    throw new Error(`--backup-store-credentials ${path}: not JSON`);
  }
  const o = v as Record<string, unknown>;
  if (typeof o?.accessKeyId !== 'string' || o.accessKeyId === '' || typeof o.secretAccessKey !== 'string' || o.secretAccessKey === '') {
    throw new Error(`--backup-store-credentials ${path}: must hold {"accessKeyId": "...", "secretAccessKey": "..."}`);
  }
  return { accessKeyId: o.accessKeyId, secretAccessKey: o.secretAccessKey };
}
