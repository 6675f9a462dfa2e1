import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { relative, sep } from 'node:path';
import { afterAll } from 'vitest';
import { isUnder, OWNER_VAR, ownedServers, type DbServer } from './db-servers.js';

/**
 * A setup file (vitest.config.ts) of every project that starts real servers: a test file that
 * leaves a mariadbd/mysqld running once its own afterAll hooks are done fails, naming the
 * servers' data directories, and those servers are killed (docs/testing.md, "Leaked servers").
 *
 * Only this file's servers count: each file's worker gets its own random token in OWNER_VAR,
 * which every process it starts inherits, so servers of another file, of the other e2e lane, or
 * of another engineer's run on the same machine (same temp prefixes, same binaries) never do.
 * This hook is registered before the file's own, so it runs after them: a lab e2e file keeps its
 * servers until its afterAll stops the lab, and that is fine.
 */
const token = `${process.pid}-${randomBytes(8).toString('hex')}`;
process.env[OWNER_VAR] = token;

/** A server stopped by the file's last hook may still be on its way out: this long, then it leaked. */
const GRACE_MS = 20_000;

/** The temp folder a data directory is in (`/tmp/hbl-agent-AbC123`), else the directory itself. */
function folderOf(s: DbServer): string {
  if (!s.datadir) return `(no --datadir: ${s.args.join(' ').slice(0, 200)})`;
  const tmp = tmpdir();
  if (!isUnder(s.datadir, tmp)) return s.datadir;
  const top = relative(tmp, s.datadir).split(sep)[0];
  return top ? `${tmp}${sep}${top}` : s.datadir;
}

afterAll(async () => {
  const deadline = Date.now() + GRACE_MS;
  let left = ownedServers(token);
  while (left.length > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 250));
    left = ownedServers(token);
  }
  if (left.length === 0) return;
  for (const s of left) {
    try {
      process.kill(s.pid, 'SIGKILL');
    } catch {
      // It ended on its own meanwhile.
    }
  }
  const folders = [...new Set(left.map(folderOf))];
  throw new Error(`database servers left running after this file's tests (now killed): ${folders.join(', ')} `
    + `(pids ${left.map((s) => s.pid).join(', ')}; data directories ${left.map((s) => s.datadir ?? '?').join(', ')})`);
}, GRACE_MS + 10_000);
