import { Transform } from 'node:stream';

/**
 * Passes a dump through and keeps the GTID position its consistent snapshot was taken at
 * (mariadb-dump prints `-- SET GLOBAL gtid_slave_pos='...';` at the start of a line, near the
 * end, for `--master-data --gtid`; customer strings cannot start a line, their newlines are
 * escaped). The last match wins.
 */
export function snapshotGtidTap(): { tap: Transform; gtid: () => string | undefined } {
  let tail = '';
  let found: string | undefined;
  const re = /\n-- SET GLOBAL gtid_slave_pos='([0-9,-]*)';/g;
  const tap = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      const text = tail + chunk.toString('latin1');
      for (const m of text.matchAll(re)) found = m[1];
      tail = text.slice(-120);
      cb(null, chunk);
    },
  });
  return { tap, gtid: () => found };
}
