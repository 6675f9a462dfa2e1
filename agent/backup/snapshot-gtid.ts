import { Transform } from 'node:stream';
import { dumpSnapshotPoint, type BinlogPoint } from '../mysql/account-changes.js';

/** How much of a dump's start is kept while looking for its binlog position. */
const HEAD_MAX = 1 << 20;

/**
 * Passes a dump through and keeps the GTID position its consistent snapshot was taken at
 * (mariadb-dump prints `-- SET GLOBAL gtid_slave_pos='...';` at the start of a line, near the
 * end, for `--master-data --gtid`; customer strings cannot start a line, their newlines are
 * escaped). The last match wins. `point` is the same snapshot as a position in the dumped
 * server's own binlog, from the header (`-- CHANGE MASTER TO ...`, before the first schema).
 */
export function snapshotGtidTap(): { tap: Transform; gtid: () => string | undefined; point: () => BinlogPoint | undefined } {
  let tail = '';
  let found: string | undefined;
  let head: string | undefined = '';
  let point: BinlogPoint | undefined;
  const re = /\n-- SET GLOBAL gtid_slave_pos='([0-9,-]*)';/g;
  const tap = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      const text = tail + chunk.toString('latin1');
      if (head !== undefined) {
        head += chunk.toString('latin1');
        point = dumpSnapshotPoint(head);
        // Past the header (or too long to be one) nothing later can name the position.
        if (point || head.length >= HEAD_MAX || /^-- Current Database: /m.test(head)) head = undefined;
      }
      for (const m of text.matchAll(re)) found = m[1];
      tail = text.slice(-120);
      cb(null, chunk);
    },
  });
  return { tap, gtid: () => found, point: () => point };
}
