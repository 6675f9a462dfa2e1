import { newBackupKey } from './backup-crypto.js';
import { updateState, type DbState, type StateHolder } from '../database/state.js';

/** A database as the key rules read it: its state and the control plane's desired state. */
export interface KeyedDatabase extends StateHolder {
  readonly state?: DbState;
  readonly desired?: { backupKey?: string } | undefined;
}

/**
 * The key a database's backups, bases and binlog segments are encrypted with (docs/agent.md §6,
 * "Backup store"). The control plane makes it and sends it to the agents running the database
 * (DesiredDatabase.backup_key); it is kept in the database's state (0600). A key the state already
 * holds stays whatever the control plane sends: the objects written so far are encrypted with it
 * (a database from before the control plane made keys), and the report hands it to the control
 * plane, which adopts it. Only when the control plane sent none (an older one, or a database it
 * has no key for yet) is a key made here.
 */
export async function databaseKey(c: KeyedDatabase): Promise<string> {
  const s = c.state;
  if (!s) throw new Error('the database was deleted');
  if (!s.backupKey) await updateState(c, { backupKey: c.desired?.backupKey || newBackupKey() });
  return s.backupKey!;
}

/** The key to report: only one the control plane did not send (which it then adopts). */
export function keyToReport(c: Pick<KeyedDatabase, 'state' | 'desired'>): string | undefined {
  const key = c.state?.backupKey;
  return key && key !== c.desired?.backupKey ? key : undefined;
}
