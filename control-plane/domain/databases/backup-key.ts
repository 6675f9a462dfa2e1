import { randomBytes } from 'node:crypto';

/**
 * A new database's backup key: base64 of 32 random bytes, the agents' backup-crypto format. Made
 * when the database is created, a fork too (a fork's objects are its own; the source's key stays
 * the source's), kept sealed (databases.backup_key) and sent only to the agents that run the
 * database (docs/security/secrets.md, "Backup keys").
 */
export function newBackupKey(): string {
  return randomBytes(32).toString('base64');
}
