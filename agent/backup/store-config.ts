import { readFileSync, statSync } from 'node:fs';
import type { Flags } from '../../lib/args.js';

// The backup store's settings as the agent's flags give them (docs/install.md, "Backup store"):
// kept apart from s3-store.ts so that parsing flags loads no S3 client.

export interface S3StoreConfig {
  bucket: string;
  /** '' or ending in '/'. */
  prefix: string;
  /** https://host:port of an S3-compatible service; absent: AWS's endpoint for `region`. */
  endpoint?: string;
  region: string;
  /** Bucket in the path (`host/bucket/key`), as most self-hosted stores want, not in the host name. */
  pathStyle: boolean;
  /** PEM of the CA(s) the store's TLS certificate is checked against (default: the system's). */
  ca?: string;
  credentials: { accessKeyId: string; secretAccessKey: string };
}

/**
 * What a store is called in the agent's report (AgentReport.backup_store): endpoint, bucket and
 * prefix, never credentials. Two agents naming the same store read each other's objects.
 */
export function storeIdentity(cfg: Pick<S3StoreConfig, 'bucket' | 'prefix' | 'endpoint' | 'region'>): string {
  return `s3:${cfg.endpoint ?? `aws:${cfg.region}`}/${cfg.bucket}/${cfg.prefix}`;
}

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

/**
 * `--backup-store s3://BUCKET/PREFIX` and its companions (docs/install.md, "Backup store"): an
 * S3-compatible object store for backups and the binlog archive; absent, they stay in the state
 * folder. The keys come from a 0600 JSON file or the 0600 config file, never from the command
 * line (`ps` shows it).
 */
export function backupStoreFlags(argv: string[], f: Flags): S3StoreConfig | undefined {
  // The store's secret key only from a config file (which must then be 0600), never from the
  // command line, where `ps` shows it to every user of the host.
  if (argv.some((a) => a === '--backup-store-secret-access-key' || a.startsWith('--backup-store-secret-access-key='))) {
    throw new Error('--backup-store-secret-access-key is read from the --config file (mode 0600) or --backup-store-credentials, never from the command line');
  }
  const url = f['backup-store'] as string | undefined;
  const companions = ['backup-store-endpoint', 'backup-store-region', 'backup-store-path-style', 'backup-store-ca', 'backup-store-credentials',
    'backup-store-access-key-id', 'backup-store-secret-access-key'];
  if (url === undefined) {
    const stray = companions.find((k) => f[k] !== undefined);
    if (stray) throw new Error(`--${stray} needs --backup-store`);
    return undefined;
  }
  const { bucket, prefix } = parseStoreUrl(url);
  const endpoint = f['backup-store-endpoint'] as string | undefined;
  if (endpoint !== undefined && !/^https:\/\/[^/?#\s]+\/?$/.test(endpoint)) throw new Error('--backup-store-endpoint must be https://HOST[:PORT] (the store is reached over TLS only)');
  const keyId = f['backup-store-access-key-id'] as string | undefined;
  const secret = f['backup-store-secret-access-key'] as string | undefined;
  const file = f['backup-store-credentials'] as string | undefined;
  if ((keyId === undefined) !== (secret === undefined)) throw new Error('--backup-store-access-key-id and --backup-store-secret-access-key go together');
  if (keyId !== undefined && file !== undefined) throw new Error('give the store\'s keys either in the config file or with --backup-store-credentials, not both');
  const credentials = keyId !== undefined && secret !== undefined
    ? { accessKeyId: keyId, secretAccessKey: secret }
    : file !== undefined ? loadStoreCredentials(file) : undefined;
  if (!credentials) throw new Error('--backup-store needs --backup-store-credentials (or the keys in the config file)');
  const caFile = f['backup-store-ca'] as string | undefined;
  return {
    bucket, prefix, endpoint, credentials,
    region: (f['backup-store-region'] as string | undefined) ?? 'us-east-1',
    pathStyle: Boolean(f['backup-store-path-style']),
    ...(caFile !== undefined ? { ca: readFileSync(caFile, 'utf8') } : {}),
  };
}
