import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { chainFrom, gtidLe, oldestRestorable, planRestore, prune } from '../../../agent/binlog/chain.js';
import { binlogDatetime, forkStopMs, recoveryStopMs, replayFilter } from '../../../agent/binlog/replay.js';
import { snapshotGtidTap } from '../../../agent/backup/backup-service.js';

const seg = (seq: number, from: number, to: number, closedMs: number) => ({ seq, gtidStart: from ? `0-1-${from}` : '', gtidEnd: `0-1-${to}`, closedMs });

describe('binlog chains', () => {
  it('a fork second after the archive\'s last segment: planned from the whole chain once the archive is known complete', () => {
    // The base at 0-1-10; the last segment, closed at 5,000, ends at 0-1-12; the fork asks for
    // an instant (stop 6,000) after which a round flushed and found nothing more to close.
    const bases = [{ id: 1, snapshotGtid: '0-1-10', finishedMs: 1000 }];
    const segs = [seg(1, 0, 8, 900), seg(2, 8, 12, 5000)];
    expect(planRestore(bases, segs, 6000)).toBeUndefined();
    expect(planRestore(bases, segs, 6000, true)).toEqual({ base: bases[0], segments: [segs[1]] });
    // A base at the archive's end: nothing to replay.
    expect(planRestore([{ id: 2, snapshotGtid: '0-1-12', finishedMs: 5500 }], segs, 6000, true)?.segments).toEqual([]);
    // A gap still breaks it.
    expect(planRestore(bases, [seg(1, 0, 8, 900), seg(3, 11, 12, 5000)], 6000, true)).toBeUndefined();
  });

  it('compares GTID positions per domain', () => {
    expect(gtidLe('', '0-1-1')).toBe(true);
    expect(gtidLe('0-1-5', '0-2-5')).toBe(true);
    expect(gtidLe('0-1-6', '0-1-5')).toBe(false);
    expect(gtidLe('0-1-5,1-1-2', '0-1-9')).toBe(false);
  });

  it('follows segments after a backup, overlaps allowed, and refuses a gap', () => {
    const s = [seg(1, 0, 10, 1000), seg(2, 10, 20, 2000), seg(3, 15, 30, 3000)];
    expect(chainFrom('0-1-12', s)!.map((x) => x.seq)).toEqual([2, 3]);
    expect(chainFrom('0-1-12', [seg(1, 0, 10, 1000), seg(3, 15, 30, 3000)])).toBeUndefined();
    expect(chainFrom('0-1-5', s, 2000)!.map((x) => x.seq)).toEqual([1, 2]);
    // An instant past the archive's end cannot be reached.
    expect(chainFrom('0-1-5', s, 9000)).toBeUndefined();
  });

  it('says the oldest backup with an unbroken chain is the oldest restorable second, and plans from the newest before the instant', () => {
    const segments = [seg(1, 10, 20, 5000), seg(2, 20, 30, 9000)];
    const bases = [{ id: 1, snapshotGtid: '0-1-2', finishedMs: 1200 }, { id: 2, snapshotGtid: '0-1-12', finishedMs: 3400 }, { id: 3, snapshotGtid: '0-1-25', finishedMs: 8000 }];
    // Base 1 ends at 2 but the archive starts at 10: broken. Base 2 reaches the end.
    expect(oldestRestorable(bases, segments)).toBe(4000);
    expect(planRestore(bases, segments, 7000)).toMatchObject({ base: { id: 2 }, segments: [{ seq: 1 }, { seq: 2 }] });
    expect(planRestore(bases, segments, 9000)).toMatchObject({ base: { id: 3 }, segments: [{ seq: 2 }] });
    expect(planRestore(bases, segments, 3000)).toBeUndefined();
    expect(oldestRestorable([], segments)).toBeUndefined();
  });

  it('prunes what no instant inside the retention needs, never a customer backup', () => {
    const segments = [seg(1, 0, 10, 1000), seg(2, 10, 20, 5000), seg(3, 20, 30, 9000)];
    const bases = [
      { id: 1e9 + 1, snapshotGtid: '', finishedMs: 500, hidden: true },
      { id: 4, snapshotGtid: '0-1-10', finishedMs: 2000, hidden: false },
      { id: 1e9 + 2, snapshotGtid: '0-1-20', finishedMs: 6000, hidden: true },
    ];
    expect(prune(bases, segments, 10_000, 5000)).toEqual({ bases: [1e9 + 1], segments: [1] });
    expect(prune(bases, segments, 10_000, 100_000)).toEqual({ bases: [], segments: [] });
  });
});

describe('fork replay helpers', () => {
  it('formats the stop instant in UTC', () => {
    expect(binlogDatetime(Date.UTC(2026, 10, 26, 14, 50, 15))).toBe('2026-11-26 14:50:15');
  });

  it('stops before the restore second, or after it for a fork asked for with no restore time', () => {
    const t = Date.UTC(2026, 10, 26, 14, 50, 15);
    expect(forkStopMs({ forkRestoreMs: t, forkThroughSecond: false })).toBe(t);
    expect(forkStopMs({ forkRestoreMs: String(t) })).toBe(t);
    expect(forkStopMs({ forkRestoreMs: t, forkThroughSecond: true })).toBe(t + 1000);
  });

  it('a recovery replays to the whole second after the archive\'s last close, with the whole chain', () => {
    const closed = Date.UTC(2026, 10, 26, 14, 50, 15, 420);
    expect(recoveryStopMs(closed)).toBe(Date.UTC(2026, 10, 26, 14, 50, 16));
    expect(recoveryStopMs(Date.UTC(2026, 10, 26, 14, 50, 15))).toBe(Date.UTC(2026, 10, 26, 14, 50, 16));
    // Every segment after the base, the last one included (nothing was closed after the stop).
    const bases = [{ id: 1, snapshotGtid: '0-1-10', finishedMs: 1000 }];
    const segs = [seg(1, 0, 8, 900), seg(2, 8, 12, 5000), seg(3, 12, 20, 9400)];
    expect(planRestore(bases, segs, recoveryStopMs(9400), true)?.segments.map((s) => s.seq)).toEqual([2, 3]);
  });

  it('drops the source GTIDs and linroot account statements, keeps everything else', async () => {
    const sql = [
      '/*M!100001 SET @@session.gtid_domain_id=0*//*!*/;',
      '/*M!100001 SET @@session.server_id=1*//*!*/;',
      '/*M!100001 SET @@session.gtid_seq_no=5*//*!*/;',
      'SET TIMESTAMP=1795704793/*!*/;',
      "CREATE USER 'linroot'@'%' IDENTIFIED BY PASSWORD '*AB'",
      '/*!*/;',
      "create user u@'%' identified by 'x'",
      '/*!*/;',
      "GRANT SELECT ON *.* TO 'linroot'@'%'/*!*/;",
      'COMMIT/*!*/;',
    ].join('\n') + '\n';
    let out = '';
    for await (const c of Readable.from([Buffer.from(sql.slice(0, 50)), Buffer.from(sql.slice(50))]).pipe(replayFilter())) out += (c as Buffer).toString();
    expect(out).toBe(["SET TIMESTAMP=1795704793/*!*/;", "create user u@'%' identified by 'x'", '/*!*/;', 'COMMIT/*!*/;', ''].join('\n'));
  });

  it('finds the snapshot position mariadb-dump prints, not one inside a customer string', async () => {
    const { tap, gtid } = snapshotGtidTap();
    const dump = "INSERT INTO t VALUES ('\\n-- SET GLOBAL gtid_slave_pos=\\'9-9-9\\';');\n-- SET GLOBAL gtid_slave_pos='0-1-42';\n";
    for await (const _ of Readable.from([Buffer.from(dump.slice(0, 70)), Buffer.from(dump.slice(70))]).pipe(tap)) void _;
    expect(gtid()).toBe('0-1-42');
  });

  it('keeps the binlog position of the dump\'s header only once its line is whole, and none that comes after the first schema', async () => {
    const head = "-- MariaDB dump\n--\n-- Position to start replication or point-in-time recovery from\n--\n\n-- CHANGE MASTER TO MASTER_LOG_FILE='db1-n2-bin.000004', MASTER_LOG_POS=1234;\n\n";
    const read = async (chunks: string[]) => {
      const t = snapshotGtidTap();
      for await (const _ of Readable.from(chunks.map((x) => Buffer.from(x))).pipe(t.tap)) void _;
      return t.point();
    };
    const cut = head.indexOf('1234') + 2;
    expect(await read([head.slice(0, cut), head.slice(cut)])).toEqual({ file: 'db1-n2-bin.000004', pos: 1234 });
    // A customer line after the first schema's header is never read as the position.
    expect(await read(["-- MariaDB dump\n--\n-- Current Database: `app`\n--\n", "-- CHANGE MASTER TO MASTER_LOG_FILE='x', MASTER_LOG_POS=1;\n"])).toBeUndefined();
  });
});
