import { PassThrough, type Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import type { DatabaseController } from '../database/controller.js';
import { q, withAdmin } from '../mysql/admin.js';
import { clientError, customerSchemas, SYSTEM_USERS } from '../mysql/customer-data.js';
import type { ContainerRuntime } from '../runtime/container-runtime.js';
import { BACKUP_CIPHER, createDecryptStream } from './backup-crypto.js';
import type { BackupManifest, BackupStorage } from './backup-storage.js';

/**
 * Replaces the customer's data on node p with backup m: drops the customer schemas and
 * accounts, then loads the dump (decrypted when the manifest says so) with the binlog on, so
 * the replicas follow through replication. Throws with the client's ERROR line.
 */
export async function loadBackup(
  deps: { runtime: ContainerRuntime; storage: BackupStorage },
  c: Pick<DatabaseController, 'id' | 'state' | 'adminTarget' | 'nodeName'>,
  p: number,
  m: BackupManifest,
): Promise<void> {
  const s = c.state!;
  const what = m.type === 'pre-restore' ? 'the safety copy' : `backup ${m.id}`;
  let decrypt: Transform | undefined;
  if (m.format === 'mariadb-dump+gzip+aes-256-gcm') {
    if (m.encryption?.scheme !== BACKUP_CIPHER) throw new Error(`${what} uses an unknown encryption scheme ${m.encryption?.scheme ?? '(none)'}; nothing was changed`);
    if (!s.backupKey) throw new Error(`${what} is encrypted but this database has no backup key; nothing was changed`);
    decrypt = createDecryptStream(s.backupKey);
  } else if (m.format !== 'mariadb-dump+gzip') {
    throw new Error(`${what} has an unknown format ${String(m.format)}; nothing was changed`);
  }
  await withAdmin(await c.adminTarget(p), async (x) => {
    for (const d of await customerSchemas(x)) await x.query(`DROP DATABASE \`${d.replace(/`/g, '``')}\``);
    for (const u of await q(x, 'SELECT User, Host FROM mysql.user')) {
      if (!SYSTEM_USERS.includes(String(u.User))) await x.query('DROP USER ?@?', [u.User, u.Host]);
    }
  });
  // The client gets a stream only this function ends: input that breaks (unreadable,
  // undecryptable, bad gzip) ends it early and is reported through `fed`, whatever the
  // timing of the client's start; the partial load is then rolled back by the caller.
  const feed = new PassThrough();
  const pump = async (source: AsyncIterable<Buffer>) => {
    for await (const chunk of source) {
      if (feed.destroyed) throw new Error('the client stopped reading');
      if (!feed.write(chunk)) await new Promise((r) => (feed.once('drain', r), feed.once('close', r)));
    }
  };
  const src = deps.storage.reader(c.id, m.id, m.file);
  const feeding = (decrypt ? pipeline(src, decrypt, createGunzip(), pump) : pipeline(src, createGunzip(), pump))
    .then(() => undefined, (err: Error) => err)
    .finally(() => feed.end());
  const res = await deps.runtime.exec(c.nodeName(p), ['mariadb', '--user=root', '--binary-mode'], {
    stdin: feed,
    env: { MYSQL_PWD: s.adminPassword },
  });
  // A client that stopped early (an SQL error) leaves input unread; stop feeding it.
  feed.destroy();
  const fed = await feeding;
  if (res.exitCode !== 0) throw new Error(`loading ${what} failed: ${clientError(res.stderr)}`);
  if (fed instanceof Error) throw new Error(`reading ${what} failed: ${fed.message}`);
}
