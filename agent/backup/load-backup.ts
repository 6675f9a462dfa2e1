import { PassThrough, type Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { drainedOrClosed } from '../../lib/drained.js';
import type { DatabaseController } from '../database/controller.js';
import { q, withAdmin } from '../mysql/admin.js';
import { ACCOUNTS_HEADER, clientError, customerSchemas, LEGACY_ACCOUNTS_HEADER, SQL_CLIENT, SYSTEM_USERS } from '../mysql/customer-data.js';
import type { ContainerRuntime } from '../runtime/container-runtime.js';
import { decryptStreamFor } from './backup-crypto.js';
import type { BackupManifest, BackupStorage } from './backup-storage.js';
import { decompressor, storedFormat } from './store-codec.js';

type LoadTarget = Pick<DatabaseController, 'id' | 'state' | 'adminTarget' | 'nodeName'>;
type LoadDeps = { runtime: ContainerRuntime; storage: BackupStorage };

/** The first lines of a dump: where the legacy account section would be. */
const HEAD_BYTES = 4096;
/** How a dump written by mariadb-dump (10.11.8+ prints the sandbox line first) or MySQL's begins. */
const DUMP_START = /^(\/\*M!999999\\- enable the sandbox mode \*\/|-- MariaDB dump |-- MySQL dump )/;

function describe(m: BackupManifest): string {
  return m.type === 'pre-restore' ? 'the safety copy' : `backup ${m.id}`;
}

type Stages = { decrypt?: Transform; decompress: Transform };

/**
 * The stages that turn m's stored bytes back into SQL: decryption with the database's key when
 * the manifest says so, then the decompressor its format names (zstd now, gzip for older dumps).
 * Called afresh for each read: a stream is used once.
 */
function plainStages(s: NonNullable<LoadTarget['state']>, m: BackupManifest): Stages {
  const what = describe(m);
  const f = storedFormat(m.format);
  if (f?.kind !== 'mariadb-dump') throw new Error(`${what} has an unknown format ${String(m.format)}; nothing was changed`);
  if (!f.encrypted) return { decompress: decompressor(f.codec) };
  if (!s.backupKey) throw new Error(`${what} is encrypted but this database has no backup key; nothing was changed`);
  let decrypt: Transform;
  try {
    decrypt = decryptStreamFor(m.encryption, s.backupKey);
  } catch (err) {
    throw new Error(`${what} uses ${(err as Error).message}; nothing was changed`);
  }
  return { decrypt, decompress: decompressor(f.codec) };
}

/** The first HEAD_BYTES of m's SQL (fewer when it is shorter). */
async function headOf(deps: LoadDeps, c: LoadTarget, m: BackupManifest, { decrypt, decompress }: Stages): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  const take = async (source: AsyncIterable<Buffer>) => {
    for await (const chunk of source) {
      chunks.push(chunk);
      size += chunk.length;
      // Stopping here closes the file, the decryption and the decompressor (pipeline then reports an abort).
      if (size >= HEAD_BYTES) throw new Error('enough');
    }
  };
  const src = deps.storage.reader(c.id, m.id, m.file);
  try {
    await (decrypt ? pipeline(src, decrypt, decompress, take) : pipeline(src, decompress, take));
  } catch (err) {
    if (size < HEAD_BYTES) throw err;
  }
  return Buffer.concat(chunks).subarray(0, HEAD_BYTES).toString('utf8');
}

/**
 * Refuses, before anything changes, a backup whose account section cannot be loaded safely.
 * This agent's backups begin with ACCOUNTS_HEADER (privilege-table rows, every value quoted by
 * the driver). Older agents wrote LEGACY_ACCOUNTS_HEADER followed by `SHOW CREATE USER` and
 * `SHOW GRANTS` text, in which the server does not escape REQUIRE SUBJECT/ISSUER/CIPHER
 * strings: a customer could end a statement inside one and have the rest run as root. That
 * text is never replayed, and it cannot be skipped either: the same strings can forge the line
 * where the dump begins. So an old backup loads only when its section is empty (the next line
 * is mariadb-dump's first, or the end); one holding accounts is refused, naming the reason
 * (docs/security/mysql.md, "Account backups"). A file with neither header holds no account
 * section at all (every agent wrote one first): it loads as the dump it is.
 */
export async function assertLoadable(deps: LoadDeps, c: LoadTarget, m: BackupManifest): Promise<void> {
  const what = describe(m);
  const head = await headOf(deps, c, m, plainStages(c.state!, m)).catch((err: Error) => {
    throw new Error(`${what} cannot be read: ${err.message}; nothing was changed`);
  });
  if (head.startsWith(`${ACCOUNTS_HEADER}\n`) || !head.startsWith(`${LEGACY_ACCOUNTS_HEADER}\n\n`)) return;
  const next = head.slice(LEGACY_ACCOUNTS_HEADER.length + 2);
  if (next === '' || DUMP_START.test(next)) return;
  throw new Error(`${what} was taken by an older agent and holds the customer's accounts as text the server rendered, which is not loaded (a quoted string in it could run as root); restore or fork from a backup taken since, or re-create the accounts; nothing was changed`);
}

/**
 * Replaces the customer's data on node p with backup m: checks the account section
 * (assertLoadable), drops the customer schemas, accounts and roles, then loads the backup
 * (decrypted when the manifest says so) with the binlog on, so the replicas follow through
 * replication. Throws with the client's ERROR line.
 */
export async function loadBackup(deps: LoadDeps, c: LoadTarget, p: number, m: BackupManifest): Promise<void> {
  const s = c.state!;
  const what = describe(m);
  const { decrypt, decompress } = plainStages(s, m);
  await assertLoadable(deps, c, m);
  await withAdmin(await c.adminTarget(p), async (x) => {
    for (const d of await customerSchemas(x)) await x.query(`DROP DATABASE \`${d.replace(/`/g, '``')}\``);
    for (const u of await q(x, "SELECT User, Host, IFNULL(JSON_VALUE(Priv, '$.is_role'), 'false') AS role FROM mysql.global_priv")) {
      if (SYSTEM_USERS.includes(String(u.User))) continue;
      if (String(u.role) === 'true') await x.query('DROP ROLE ?', [u.User]);
      else await x.query('DROP USER ?@?', [u.User, u.Host]);
    }
  });
  // The client gets a stream only this function ends: input that breaks (unreadable,
  // undecryptable, badly compressed) ends it early and is reported through `fed`, whatever the
  // timing of the client's start; the partial load is then rolled back by the caller.
  const feed = new PassThrough();
  const pump = async (source: AsyncIterable<Buffer>) => {
    for await (const chunk of source) {
      if (feed.destroyed) throw new Error('the client stopped reading');
      if (!feed.write(chunk)) await drainedOrClosed(feed);
    }
  };
  const src = deps.storage.reader(c.id, m.id, m.file);
  const feeding = (decrypt ? pipeline(src, decrypt, decompress, pump) : pipeline(src, decompress, pump))
    .then(() => undefined, (err: Error) => err)
    .finally(() => feed.end());
  const res = await deps.runtime.exec(c.nodeName(p), [...SQL_CLIENT, '--user=root', '--binary-mode'], {
    stdin: feed,
    env: { MYSQL_PWD: s.adminPassword },
  });
  // A client that stopped early (an SQL error) leaves input unread; stop feeding it.
  feed.destroy();
  const fed = await feeding;
  if (res.exitCode !== 0) throw new Error(`loading ${what} failed: ${clientError(res.stderr)}`);
  if (fed instanceof Error) throw new Error(`reading ${what} failed: ${fed.message}`);
}
