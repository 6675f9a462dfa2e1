import { join } from 'node:path';
import type { Store } from '../domain/store.js';
import { defaultKekFile, type Db } from './sqlite/database.js';
import { openSqliteStore } from './sqlite/store.js';
import { openPostgresStore } from './postgres/store.js';

/** Whether `--store` names a PostgreSQL database (anything else is an error, empty is SQLite). */
export function isPostgresUrl(s: string): boolean {
  return /^postgres(ql)?:\/\//.test(s);
}

/**
 * A store as opened: the SQLite connection beside the repositories when the store is SQLite
 * (tests read rows through it), so that nothing above this file names an adapter.
 */
export type OpenedStore = Store & { db?: Db };

/**
 * The control plane's store (docs/install.md, "The store"): the SQLite file in the state folder
 * by default, or the PostgreSQL database `store` names, for several replicas. Either way the
 * schema is brought up to date first and secrets are sealed with the key file
 * (`<stateDir>/keys/kek` unless `kekFile` says otherwise).
 */
export async function openStore(stateDir: string, opts: { store?: string; kekFile?: string } = {}): Promise<OpenedStore> {
  const sqlitePath = join(stateDir, 'control-plane.sqlite');
  const kekFile = opts.kekFile ?? defaultKekFile(sqlitePath);
  const url = opts.store ?? '';
  if (url === '' || url === 'sqlite') return openSqliteStore(sqlitePath, { kekFile });
  if (!isPostgresUrl(url)) throw new Error('--store must be sqlite or a postgres:// URL');
  return openPostgresStore(url, { kekFile });
}
