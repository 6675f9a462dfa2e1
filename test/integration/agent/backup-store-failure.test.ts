// integration-lane: concurrent (the process runtime in its own temp root: one server on 127.0.0.1 and a free port, removed with its data).
/**
 * A logical backup (agent/backup/dump-backup.ts writeDump) whose store fails, against a real
 * MariaDB server run by the process runtime. The store is a local folder where the backup's file
 * cannot be opened (a folder already has its name: EISDIR, as a full disk or a refusing object
 * store fails at the start), or /dev/full (ENOSPC once the dump is under way). The backup must fail with the store's error and leave nothing, and
 * never end the agent: the failure used to come while an encrypted backup's key was being saved,
 * before anything listened to the file's stream (an uncaught 'error', which fails this file's
 * run), and a dump writing into the failed store waited on its full output for good.
 */
import { createWriteStream, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocalBackupStorage } from '../../../agent/backup/backup-storage.js';
import { writeDump } from '../../../agent/backup/dump-backup.js';
import type { DbState } from '../../../agent/database/state.js';
import { q, withAdmin, type AdminTarget } from '../../../agent/mysql/admin.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { silentLogger } from '../../../lib/logger.js';
import { localServers } from './local-servers.js';

const ADMIN = 'Admin.Pass_01';
const NODE = 'fstorefail-n1';

describe('a logical backup whose store fails', () => {
  let root: string;
  let rt: ContainerRuntime;
  let admin: AdminTarget;

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'fulcrum-storefail-'));
    rt = createProcessRuntime({ root: join(root, 'runtime'), logger: silentLogger() });
    ({ admin } = await (await localServers({ rt, root, adminPassword: ADMIN, replPassword: 'Repl.Pass_01' })).start(NODE));
  }, 180_000);

  afterAll(async () => {
    await rt?.remove(NODE, { withData: true }).catch(() => undefined);
    await rt?.close();
    if (root) rmSync(root, { recursive: true, force: true, maxRetries: 3 });
  });

  /**
   * Database `id` on the node, with no backup key yet (the first encrypted backup makes and
   * saves one, as the agent does: its state file written to disk); `file` cannot be opened in
   * its backup's folder.
   */
  const setup = (id: number, file: string) => {
    const backups = join(root, `backups-${id}`);
    mkdirSync(join(backups, String(id), '1', file), { recursive: true });
    const state = { id, adminPassword: ADMIN, primary: 1, running: { version: 'local' } } as unknown as DbState;
    const c = {
      id, state, desired: undefined,
      nodeName: () => NODE,
      adminTarget: async () => admin,
      save: () => writeFile(join(root, `state-${id}.json`), JSON.stringify(state), { mode: 0o600 }),
    };
    return { c, storage: createLocalBackupStorage(backups), backups };
  };
  const meta = { label: 'store failure', type: 'snapshot' as const, createdMs: 0 };

  it('fails with the store\'s error when the database has no customer schema (no dump runs), and leaves nothing', async () => {
    const { c, storage, backups } = setup(11, 'dump.sql.zst.aes');
    await expect(writeDump({ storage, runtime: rt }, c, 1, 1, true, meta)).rejects.toThrow(/EISDIR/);
    expect(readdirSync(join(backups, '11'))).toEqual([]);
    // The key was made and saved before the store was opened.
    expect(c.state.backupKey).toMatch(/\S/);
  }, 60_000);

  it('stops the dump and fails with the store\'s error when there is data to dump, and leaves nothing', async () => {
    await withAdmin(admin, async (x) => {
      await q(x, 'SET GLOBAL read_only=OFF');
      await q(x, 'CREATE DATABASE IF NOT EXISTS app');
      await q(x, 'CREATE TABLE IF NOT EXISTS app.t (id INT PRIMARY KEY, pad VARCHAR(100) NOT NULL)');
      await q(x, 'INSERT IGNORE INTO app.t SELECT seq, REPEAT(MD5(seq), 3) FROM app.seq_1_to_200000');
    });
    const { c, storage: local, backups } = setup(12, 'unused');
    // A full disk: the first compressed bytes fail (ENOSPC), while mariadb-dump is writing.
    let opened = 0;
    const storage = { ...local, writer: async () => {
      opened++;
      return createWriteStream('/dev/full');
    } };
    await expect(writeDump({ storage, runtime: rt }, c, 1, 1, true, meta)).rejects.toThrow(/ENOSPC/);
    expect(opened).toBe(1);
    expect(readdirSync(join(backups, '12'))).toEqual([]);
  }, 120_000);
});
