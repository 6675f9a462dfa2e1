import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';
import type { BackupManifest, BackupStorage } from './backup-storage.js';

/** The scheme of `BackupManifest.sealed`: AES-256-GCM under a key derived from the database's backup key. */
export const MANIFEST_SEAL = 'fm1';

/** What a manifest holds that a tenant wrote: sealed in a store off the host. */
type Sealed = Pick<BackupManifest, 'label' | 'databases'>;

const SALT = 16;
const IV = 12;
const TAG = 16;

function keyFor(backupKey: string, salt: Buffer): Buffer {
  const raw = Buffer.from(backupKey, 'base64');
  if (raw.length !== 32) throw new Error('the backup key is not 32 bytes');
  return Buffer.from(hkdfSync('sha256', raw, salt, 'fulcrum manifest v1', 32));
}

/** Bound to the manifest it belongs to: a sealed value copied into another manifest does not open. */
const aad = (m: Pick<BackupManifest, 'databaseId' | 'id'>) => Buffer.from(`manifest:${m.databaseId}:${m.id}`);

export function sealFields(backupKey: string, m: BackupManifest): string {
  const salt = randomBytes(SALT);
  const iv = randomBytes(IV);
  const c = createCipheriv('aes-256-gcm', keyFor(backupKey, salt), iv);
  c.setAAD(aad(m));
  const plain: Sealed = { label: m.label, databases: m.databases };
  const body = Buffer.concat([c.update(JSON.stringify(plain), 'utf8'), c.final()]);
  return `${MANIFEST_SEAL}:${Buffer.concat([salt, iv, body, c.getAuthTag()]).toString('base64')}`;
}

export function openFields(backupKey: string, m: BackupManifest): Sealed {
  const [scheme, b64] = (m.sealed ?? '').split(':');
  if (scheme !== MANIFEST_SEAL || !b64) throw new Error(`backup ${m.id}: unknown manifest seal`);
  const raw = Buffer.from(b64, 'base64');
  if (raw.length < SALT + IV + TAG) throw new Error(`backup ${m.id}: the sealed manifest fields are truncated`);
  const d = createDecipheriv('aes-256-gcm', keyFor(backupKey, raw.subarray(0, SALT)), raw.subarray(SALT, SALT + IV));
  d.setAAD(aad(m));
  d.setAuthTag(raw.subarray(raw.length - TAG));
  const out = JSON.parse(Buffer.concat([d.update(raw.subarray(SALT + IV, raw.length - TAG)), d.final()]).toString('utf8')) as Sealed;
  return { label: String(out.label ?? ''), databases: Array.isArray(out.databases) ? out.databases.map(String) : [] };
}

/**
 * Backup manifests in a store off the host (docs/agent.md, "Backup store"): what a tenant wrote
 * in them (a snapshot's label, the schema names) is written encrypted under the database's
 * backup key (`sealed`, with `label: ''` and `databases: []` in clear), so the store's operator
 * reads only what retention and listing need (ids, types, times, sizes, checksums, GTIDs).
 * `keyOf` gives the key of a database this agent holds one for (its own, or a fork's source).
 *
 * Reading accepts both forms: a manifest written before sealing (plain `label`) is read as it
 * is. One whose key this agent does not hold is listed with the sealed fields empty, so retention
 * and the restorable window still count it.
 */
export function sealManifests(storage: BackupStorage, keyOf: (databaseId: number) => string | undefined): BackupStorage {
  return {
    ...storage,
    async commit(m) {
      const key = keyOf(m.databaseId);
      if (!key) throw new Error(`database ${m.databaseId} has no backup key to seal its manifest with`);
      await storage.commit({ ...m, label: '', databases: [], sealed: sealFields(key, m) });
    },
    async list(db) {
      const key = keyOf(db);
      return (await storage.list(db)).map((m) => {
        if (m.sealed === undefined) return m;
        const { sealed: _sealed, ...rest } = m;
        if (!key) return rest;
        try {
          return { ...rest, ...openFields(key, m) };
        } catch {
          // A wrong key or a changed value: the manifest's clear part still counts for retention.
          return rest;
        }
      });
    },
  };
}
