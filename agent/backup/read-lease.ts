import { existsSync, readFileSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Clock } from '../../lib/clock.js';
import type { Logger } from '../../lib/logger.js';

/**
 * Read leases on a database's stored objects (docs/agent.md, "Backup store"): a fork reading a
 * source's base and binlog segments writes one for the source before its first read, renews it
 * while it reads and removes it at the end (a restore likewise on its own database). The
 * database's retention, its delete and a customer's delete of one of its backups honour every
 * lease that has not expired: retention removes nothing of the database that round, a delete
 * leaves the objects (with the local store, the database's folder) for a later purge, a backup's
 * delete withdraws its manifest at once and leaves its data for that purge. Holder names are made
 * of numbers (`fork-<id>`, `restore-<id>`), never anything a tenant wrote. Same contract in both adapters: `hold` writes or renews, `release`
 * is idempotent, `list` gives every lease found, expired or not.
 */
export interface ReadLeases {
  hold(databaseId: number, holder: string, untilMs: number): Promise<void>;
  release(databaseId: number, holder: string): Promise<void>;
  list(databaseId: number): Promise<{ holder: string; untilMs: number }[]>;
}

/**
 * How long a lease holds without a renewal. An agent that dies holding one stops renewing it, and
 * retention and the purge go on this long after its last renewal at most; generous, so that clock
 * differences between agents of a region do not make a live reader's lease look expired.
 */
export const LEASE_MS = 5 * 60_000;
/** A reader renews its lease this often (several renewals fit in a lease: a failed one is retried). */
export const LEASE_RENEW_MS = 60_000;

const HOLDER = /^[a-z]+-\d+$/;

export function createLocalReadLeases(root: string): ReadLeases {
  const dir = (db: number) => join(root, String(db), 'leases');
  return {
    async hold(db, holder, untilMs) {
      if (!HOLDER.test(holder)) throw new Error(`bad lease holder ${holder}`);
      await mkdir(dir(db), { recursive: true, mode: 0o700 });
      const f = join(dir(db), `${holder}.json`);
      await writeFile(`${f}.tmp`, JSON.stringify({ untilMs }), { mode: 0o600 });
      await rename(`${f}.tmp`, f);
    },
    async release(db, holder) {
      await rm(join(dir(db), `${holder}.json`), { force: true });
    },
    async list(db) {
      if (!existsSync(dir(db))) return [];
      const out: { holder: string; untilMs: number }[] = [];
      for (const name of await readdir(dir(db))) {
        const m = /^(.+)\.json$/.exec(name);
        if (!m) continue;
        try {
          out.push({ holder: m[1]!, untilMs: Number((JSON.parse(await readFile(join(dir(db), name), 'utf8')) as { untilMs?: number }).untilMs ?? 0) });
        } catch {
          // Released between the listing and the read.
        }
      }
      return out;
    },
  };
}

/** Whether database `id` has a lease that has not expired at `now`. */
export async function leased(leases: ReadLeases, id: number, now: number): Promise<boolean> {
  return (await leases.list(id)).some((l) => l.untilMs > now);
}

/**
 * Runs `read` holding a lease on database `id`'s objects: written before it starts, renewed every
 * LEASE_RENEW_MS while it runs, removed when it ends (whether it succeeded or not). A renewal that
 * fails is logged and tried again at the next interval; if the lease lapses anyway and retention
 * removes an object the read still needs, the read fails on the missing object (every object is
 * checksummed, a missing segment stops the replay) and the fork is retried from scratch: never
 * wrong rows.
 */
export async function withReadLease<T>(
  d: { leases: ReadLeases; clock: Clock; logger: Logger }, id: number, holder: string, read: () => Promise<T>,
): Promise<T> {
  await d.leases.hold(id, holder, d.clock.now() + LEASE_MS);
  let timer: ReturnType<Clock['setTimeout']> | undefined;
  let ended = false;
  const renew = () => {
    timer = d.clock.setTimeout(() => {
      d.leases.hold(id, holder, d.clock.now() + LEASE_MS)
        .catch((err) => d.logger.warn({ err, database: id, holder }, 'read lease not renewed; retrying'))
        .finally(() => {
          if (!ended) renew();
        });
    }, LEASE_RENEW_MS);
  };
  renew();
  try {
    return await read();
  } finally {
    ended = true;
    timer?.cancel();
    await d.leases.release(id, holder).catch((err) => d.logger.warn({ err, database: id, holder }, 'read lease not released (it expires)'));
  }
}

/**
 * What a read lease held back, kept in a 0600 file of the agent's state folder (written whole,
 * renamed into place): the ids of deleted databases whose objects in the store wait for their
 * readers' leases to end, and the customer backups deleted while a fork or restore read their
 * database (their manifest already gone, their data waiting). One JSON array: a number is a
 * database, a `[database, backup]` pair one backup (a file of databases only reads as before).
 */
export function deferredPurges(file: string): {
  ids(): number[]; add(id: number): Promise<void>; drop(id: number): Promise<void>;
  backups(): { database: number; backup: number }[]; addBackup(database: number, backup: number): Promise<void>; dropBackup(database: number, backup: number): Promise<void>;
} {
  const positive = (n: unknown) => Number.isInteger(n) && (n as number) > 0;
  let ids: number[] = [];
  let backups: { database: number; backup: number }[] = [];
  try {
    for (const e of JSON.parse(readFileSync(file, 'utf8')) as unknown[]) {
      if (Array.isArray(e) && e.length === 2 && positive(e[0]) && positive(e[1])) backups.push({ database: e[0] as number, backup: e[1] as number });
      else if (!Array.isArray(e) && positive(Number(e))) ids.push(Number(e));
    }
  } catch {
    // None yet.
  }
  let saving = Promise.resolve();
  const save = () => {
    const text = JSON.stringify([...ids, ...backups.map((b) => [b.database, b.backup])]);
    saving = saving.catch(() => undefined).then(async () => {
      await writeFile(`${file}.tmp`, text, { mode: 0o600 });
      await rename(`${file}.tmp`, file);
    });
    return saving;
  };
  const same = (db: number, id: number) => (b: { database: number; backup: number }) => b.database === db && b.backup === id;
  return {
    ids: () => [...ids],
    async add(id) {
      if (!ids.includes(id)) ids = [...ids, id];
      await save();
    },
    async drop(id) {
      ids = ids.filter((x) => x !== id);
      await save();
    },
    backups: () => backups.map((b) => ({ ...b })),
    async addBackup(db, id) {
      if (!backups.some(same(db, id))) backups = [...backups, { database: db, backup: id }];
      await save();
    },
    async dropBackup(db, id) {
      backups = backups.filter((b) => !same(db, id)(b));
      await save();
    },
  };
}
