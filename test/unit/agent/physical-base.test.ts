import { describe, expect, it } from 'vitest';
import { backupErrorTail, isPhysical, roomToSpool, physicalBinlogPos, physicalSnapshotGtid } from '../../../agent/backup/physical-backup.js';
import { bytesAfter } from '../../../agent/binlog/archiver.js';
import { resetAccountsSql } from '../../../agent/binlog/physical-seed.js';
import { memberBase } from '../../../agent/binlog/member-seed.js';
import type { BackupManifest } from '../../../agent/backup/backup-storage.js';

describe('physical base backups (mariadb-backup)', () => {
  it('reads the chain position from what mariadb-backup logs, the last mention winning', () => {
    const log = [
      "[00] 2026-11-26 18:12:01 Connecting to server host: localhost, user: root, password: set, port: not set, socket: /run/x.sock",
      "[00] 2026-11-26 18:12:02 mariabackup: The latest check point (for incremental): '48311'",
      "[00] 2026-11-26 18:12:02 MySQL binlog position: filename 'mysql-bin.000003', position '1834', GTID of the last change '0-1-17'",
      "[00] 2026-11-26 18:12:02 MySQL binlog position: filename 'mysql-bin.000003', position '1999', GTID of the last change '0-1-18,1-2-4'",
      '[00] 2026-11-26 18:12:03 completed OK!',
    ].join('\n');
    expect(physicalSnapshotGtid(log)).toBe('0-1-18,1-2-4');
    expect(physicalBinlogPos(log)).toEqual({ file: 'mysql-bin.000003', pos: 1999 });
  });

  it('counts the binlog bytes written after a base: none before it, the rest of the file it was taken in, all of later files', () => {
    const seg = (sourceFile: string, from: number, to: number, rawBytes: number) => ({
      seq: 1, gtidStart: `0-1-${from}`, gtidEnd: `0-1-${to}`, closedMs: 0, databaseId: 1, sourceFile, node: 1,
      format: 'binlog+gzip' as const, file: 'binlog.gz', sizeBytes: 1, rawBytes, sha256: '',
    });
    const base = { snapshotGtid: '0-1-10', binlog: { file: 'mysql-bin.000002', pos: 400 } };
    expect(bytesAfter(seg('mysql-bin.000001', 1, 8, 1000), base)).toBe(0);
    expect(bytesAfter(seg('mysql-bin.000002', 8, 30, 1000), base)).toBe(600);
    expect(bytesAfter(seg('mysql-bin.000003', 30, 40, 1000), base)).toBe(1000);
    // A base without a recorded offset (or from another node's files) counts the whole file.
    expect(bytesAfter(seg('mysql-bin.000002', 8, 30, 1000), { snapshotGtid: '0-1-10' })).toBe(1000);
  });

  it('an empty server has an empty position; a log without one has none', () => {
    expect(physicalSnapshotGtid("MySQL binlog position: filename 'mysql-bin.000001', position '329', GTID of the last change ''")).toBe('');
    expect(physicalSnapshotGtid('[00] completed OK!')).toBeUndefined();
  });

  it('tells a physical copy from a dump by its format', () => {
    expect(isPhysical({ format: 'mariadb-backup+mbstream+gzip' })).toBe(true);
    expect(isPhysical({ format: 'mariadb-backup+mbstream+gzip+aes-256-gcm' })).toBe(true);
    expect(isPhysical({ format: 'mariadb-dump+gzip' })).toBe(false);
    expect(isPhysical({ format: 'mariadb-dump+gzip+aes-256-gcm' })).toBe(false);
  });

  it("keeps mariadb-backup's reason for a failure, which its last lines (InnoDB's shutdown) do not say", () => {
    const log = [
      '[00] 2026-11-26 21:21:12 Finished backing up non-InnoDB tables and files',
      '[00] 2026-11-26 21:21:12 Waiting for log copy thread to read lsn 1118628061',
      ...Array.from({ length: 30 }, () => '[00] 2026-11-26 21:21:13 Retrying read of log at LSN=615529909'),
      '[00] 2026-11-26 21:21:17 Was only able to copy log from 577854123 to 615529909, not 1118628061; try increasing innodb_log_file_size',
      'mariabackup: Stopping log copying thread.[00] 2026-11-26 21:21:17 Retrying read of log at LSN=615529909',
      '2026-11-26 21:21:17 0 [Note] InnoDB: Starting shutdown...',
    ].join('\n');
    const tail = backupErrorTail(log);
    expect(tail).toContain('Was only able to copy log from 577854123 to 615529909');
    expect(tail).toContain('Starting shutdown');
    expect(tail).not.toContain('Waiting for log copy thread');
    expect(tail.length).toBeLessThanOrEqual(800);
    expect(backupErrorTail('')).toBe('(no output)');
    expect(backupErrorTail("mariadb-backup: Got error: 1045: Access denied for user 'root'@'localhost'\ndone"))
      .toBe("mariadb-backup: Got error: 1045: Access denied for user 'root'@'localhost' | done");
  });

  it('spools a copy only where it leaves the disk a margin of a tenth of the free space, at least 256 MB', () => {
    const MB = 1024 * 1024;
    expect(roomToSpool(10_000 * MB, 1_000 * MB)).toBe(true);
    expect(roomToSpool(10_000 * MB, 9_000 * MB)).toBe(true);
    expect(roomToSpool(10_000 * MB, 9_001 * MB)).toBe(false);
    expect(roomToSpool(1_000 * MB, 744 * MB)).toBe(true);
    expect(roomToSpool(1_000 * MB, 745 * MB)).toBe(false);
    expect(roomToSpool(100 * MB, 0)).toBe(false);
  });

  it("resets a copy's accounts: the source's root, linroot and replication rows deleted, the tables rebuilt, root made with the fork's password quoted", () => {
    const sql = resetAccountsSql("a'b\\c");
    const lines = sql.trim().split('\n');
    for (const t of ['global_priv', 'db', 'tables_priv', 'columns_priv', 'procs_priv', 'proxies_priv', 'roles_mapping']) {
      expect(lines).toContain(`DELETE FROM mysql.${t} WHERE User IN ('root', 'linroot', 'fulcrum_repl');`);
      // Rebuilt after the deletes, before root is made again.
      expect(lines.indexOf(`ALTER TABLE mysql.${t} FORCE;`)).toBeGreaterThan(lines.indexOf(`DELETE FROM mysql.${t} WHERE User IN ('root', 'linroot', 'fulcrum_repl');`));
      expect(lines.indexOf(`ALTER TABLE mysql.${t} FORCE;`)).toBeLessThan(lines.findIndex((l) => l.startsWith('CREATE USER')));
    }
    expect(lines).toContain("CREATE USER 'root'@'localhost' IDENTIFIED BY 'a''b\\\\c';");
    expect(lines[0]).toBe('FLUSH PRIVILEGES;');
    expect(lines.at(-1)).toBe('FLUSH PRIVILEGES;');
  });
});

describe('the base a rebuilt member of a spread cluster starts from', () => {
  const m = (id: number, o: Partial<BackupManifest>): BackupManifest => ({
    id, databaseId: 7, label: 'binlog base', type: 'base', target: 'primary', createdMs: id, finishedMs: id, engineVersion: '11.8.3', gtidPos: '',
    snapshotGtid: `0-1-${id}`, format: 'mariadb-backup+mbstream+gzip+aes-256-gcm', file: 'base.mbstream.gz.aes', sizeBytes: 1, sha256: '', databases: [], ...o,
  });

  it('is the newest physical base of the member\'s series at a position the primary has', () => {
    const list = [m(1, {}), m(3, {}), m(2, {}), m(4, { format: 'mariadb-dump+gzip' }), m(5, { type: 'snapshot' })];
    expect((memberBase(list, '11.8.5', '0-1-40') as BackupManifest).id).toBe(3);
  });

  it('passes over another series and a base an old primary took past the failover', () => {
    // Base 9 was taken on server 1 after 0-1-8, the last of its transactions the new primary (server 2) has.
    const list = [m(5, {}), m(6, { engineVersion: '10.11.9' }), m(9, {})];
    expect((memberBase(list, '11.8.5', '0-1-8,0-2-30') as BackupManifest).id).toBe(5);
  });

  it('says why there is none', () => {
    expect(memberBase([m(4, { format: 'mariadb-dump+gzip' })], '11.8.5', '0-1-40')).toEqual({ skipped: 'the store holds no physical base of the database' });
    expect(memberBase([m(4, { engineVersion: '10.11.9' })], '11.8.5', '0-1-40')).toMatchObject({ skipped: expect.stringContaining('engine series') });
    expect(memberBase([m(41, {})], '11.8.5', '0-1-40')).toMatchObject({ skipped: expect.stringContaining('position the primary has') });
  });
});
