import { describe, expect, it } from 'vitest';
import { outsideNote } from '../../../agent/database/rejoin.js';
import { changesWhatIsReadFirst, dumpSnapshotPoint } from '../../../agent/mysql/account-changes.js';

// What a dump seed checks between its reading of the accounts and its snapshot
// (agent/mysql/account-changes.ts, docs/multi-host.md "How a new member is seeded"). The events
// are as SHOW BINLOG EVENTS printed them on MariaDB 10.11.
describe('changesWhatIsReadFirst', () => {
  it.each([
    "create user 'u1'@'%' identified by 'x'",
    "CREATE OR REPLACE USER u1 IDENTIFIED BY 'x'",
    'create role r1',
    "grant select on app.* to u1",
    'REVOKE SELECT ON app.* FROM u1',
    "use `app`; alter user u1 identified by 'y'",
    "use `app`; SET PASSWORD FOR 'u1'@'%'='*F24059C44AE7FCD38A595267C522FB133E9F06F1'",
    "use `we``ird`; DROP USER u1",
    'RENAME USER u1 TO u2',
    'SET DEFAULT ROLE r1 FOR u1',
    "/* from the app */ CREATE USER u3",
    '/*!100000 CREATE USER u4 */',
    '/*M!100000 GRANT SELECT ON *.* TO u4 */',
    '-- note\nDROP ROLE r1',
    'create database app2',
    'DROP SCHEMA app2',
  ])('a statement that changes the accounts or the schema list: %s', (info) => {
    expect(changesWhatIsReadFirst('Query', info)).toBe(true);
  });

  it.each([
    'BEGIN', 'COMMIT', 'create table app.users (id int)', "use `app`; ALTER TABLE t ADD COLUMN user INT",
    "INSERT INTO app.t VALUES ('GRANT')", 'FLUSH PRIVILEGES', 'ALTER DATABASE app CHARACTER SET utf8mb4',
    '/* grant */ CREATE TABLE g (id INT)',
  ])('a statement that does not: %s', (info) => {
    expect(changesWhatIsReadFirst('Query', info)).toBe(false);
  });

  it('rows written to a privilege table change the accounts; rows elsewhere do not', () => {
    expect(changesWhatIsReadFirst('Table_map', 'table_id: 40 (mysql.global_priv)')).toBe(true);
    expect(changesWhatIsReadFirst('Table_map', 'table_id: 41 (mysql.db)')).toBe(true);
    expect(changesWhatIsReadFirst('Table_map', 'table_id: 18 (app.t)')).toBe(false);
    expect(changesWhatIsReadFirst('Table_map', 'table_id: 19 (mysql.gtid_slave_pos)')).toBe(false);
    expect(changesWhatIsReadFirst('Write_rows_v1', 'table_id: 40 flags: STMT_END_F')).toBe(false);
    expect(changesWhatIsReadFirst('Gtid', 'GTID 0-1-6')).toBe(false);
  });
});

describe('dumpSnapshotPoint', () => {
  it('reads the snapshot position mariadb-dump --master-data=1 --gtid prints near its top', () => {
    const head = [
      'CHANGE MASTER TO MASTER_USE_GTID=slave_pos;', '',
      '-- Alternately, following is the position of the binary logging from SHOW MASTER STATUS at point of backup.', '--', '',
      "-- CHANGE MASTER TO MASTER_LOG_FILE='db1-n1-bin.000003', MASTER_LOG_POS=1835;", '',
    ].join('\n');
    expect(dumpSnapshotPoint(head)).toEqual({ file: 'db1-n1-bin.000003', pos: 1835 });
  });

  it('says nothing before the line has arrived whole', () => {
    expect(dumpSnapshotPoint("-- CHANGE MASTER TO MASTER_LOG_FILE='db1-n1-bin.000003', MASTER_LOG_")).toBeUndefined();
    expect(dumpSnapshotPoint('-- MariaDB dump 10.19\n')).toBeUndefined();
    expect(dumpSnapshotPoint("-- CHANGE MASTER TO MASTER_LOG_FILE='db1-n1-bin.000003', MASTER_LOG_POS=18")).toBeUndefined();
    // Nothing after the first schema's start counts, nor a line that only contains the text.
    expect(dumpSnapshotPoint("--\n-- Current Database: `app`\n--\n-- CHANGE MASTER TO MASTER_LOG_FILE='x.000001', MASTER_LOG_POS=4;\n")).toBeUndefined();
    expect(dumpSnapshotPoint("INSERT INTO t VALUES ('CHANGE MASTER TO MASTER_LOG_FILE=\\'x.000001\\', MASTER_LOG_POS=4;');\n")).toBeUndefined();
  });
});

describe('outsideNote', () => {
  it('names the first three tables outside InnoDB and counts the rest', () => {
    expect(outsideNote(['a.m (MyISAM)'])).toBe("1 table(s) not in InnoDB (a.m (MyISAM)) were copied outside the snapshot and may differ from the primary's; converting them to InnoDB avoids that");
    expect(outsideNote(['a.a (Aria)', 'a.b (MyISAM)', 'a.c (MyISAM)', 'a.d (MyISAM)', 'a.e (CSV)'])).toMatch(/^5 table\(s\) not in InnoDB \(a\.a \(Aria\), a\.b \(MyISAM\), a\.c \(MyISAM\) and 2 more\)/);
  });
});
