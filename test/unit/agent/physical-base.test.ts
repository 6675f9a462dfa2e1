import { describe, expect, it } from 'vitest';
import { isPhysical, physicalSnapshotGtid } from '../../../agent/backup/physical-backup.js';

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
});
