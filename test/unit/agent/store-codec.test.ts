/**
 * The store's formats (agent/backup/store-codec.ts): what the sealed writer writes now (zstd, 1 MiB
 * frames) and what older agents wrote (gzip, 64 KiB frames) both come back through the readers'
 * stages, chosen by the manifest's format and frame size.
 */
import { randomBytes } from 'node:crypto';
import { Readable, Writable, type Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import { decryptStreamFor, FRAME_BYTES, LEGACY_FRAME_BYTES, newBackupKey } from '../../../agent/backup/backup-crypto.js';
import { sealedWriter } from '../../../agent/backup/sealed-writer.js';
import { decompressor, formatOf, storedFormat, STORE_ZSTD_LEVEL } from '../../../agent/backup/store-codec.js';

async function seal(plain: Buffer, o: Parameters<typeof sealedWriter>[1]): Promise<Buffer> {
  const parts: Buffer[] = [];
  const out = new Writable({ write(c: Buffer, _e, cb) { parts.push(c); cb(); } });
  const s = sealedWriter(out, o);
  await pipeline(Readable.from([plain]), s.input);
  const { sizeBytes } = await s.done;
  const stored = Buffer.concat(parts);
  expect(sizeBytes).toBe(stored.length);
  return stored;
}

async function open(stored: Buffer, stages: Transform[]): Promise<Buffer> {
  const parts: Buffer[] = [];
  // 16 KiB pieces, as an HTTPS body delivers them.
  const pieces = Array.from({ length: Math.ceil(stored.length / 16384) }, (_, i) => stored.subarray(i * 16384, (i + 1) * 16384));
  await pipeline([Readable.from(pieces), ...stages, new Writable({ write(c: Buffer, _e, cb) { parts.push(c); cb(); } })]);
  return Buffer.concat(parts);
}

describe('store formats', () => {
  const key = newBackupKey();
  // Compressible but not trivially: SQL-like lines with random parts.
  const plain = Buffer.from(Array.from({ length: 30_000 }, (_, i) => `INSERT INTO t VALUES (${i},'${randomBytes(6).toString('hex')} row text');\n`).join(''));

  it('names every format written now and before, and nothing else', () => {
    for (const kind of ['mariadb-dump', 'binlog', 'mariadb-backup+mbstream'] as const) {
      for (const codec of ['gzip', 'zstd'] as const) {
        for (const encrypted of [false, true]) expect(storedFormat(formatOf(kind, codec, encrypted))).toEqual({ kind, codec, encrypted });
      }
    }
    for (const bad of ['mariadb-dump+lz4', 'mariadb-dump', 'binlog+zstd+aes-128-gcm', 'x+zstd', 'mariadb-dump+zstd+aes-256-gcm+gzip', '']) expect(storedFormat(bad)).toBeUndefined();
  });

  it('an encrypted zstd object as written now reads back with its manifest\'s frame size', async () => {
    const stored = await seal(plain, { level: STORE_ZSTD_LEVEL, codec: 'zstd', key });
    expect(stored.subarray(0, 4).toString()).toBe('FBK1');
    expect(stored.readUInt32BE(20) & 0x7fff_ffff).toBeLessThanOrEqual(FRAME_BYTES);
    const f = storedFormat('mariadb-dump+zstd+aes-256-gcm')!;
    expect((await open(stored, [decryptStreamFor({ scheme: 'aes-256-gcm-chunked-v1', frameBytes: FRAME_BYTES }, key), decompressor(f.codec)])).equals(plain)).toBe(true);
    // Plain zstd (a database that is not encrypted): the zstd magic number first.
    const bare = await seal(plain, { level: STORE_ZSTD_LEVEL, codec: 'zstd' });
    expect(bare.subarray(0, 4).toString('hex')).toBe('28b52ffd');
    expect((await open(bare, [decompressor('zstd')])).equals(plain)).toBe(true);
  });

  it('a gzip object as older agents wrote it still reads', async () => {
    const bare = await seal(plain, { level: 6, codec: 'gzip' });
    expect(bare.subarray(0, 2).toString('hex')).toBe('1f8b');
    expect((await open(bare, [decompressor(storedFormat('binlog+gzip')!.codec)])).equals(plain)).toBe(true);
  });

  it('a reader refuses frames beyond what the manifest says', async () => {
    const big = randomBytes(LEGACY_FRAME_BYTES * 2);
    const stored = await seal(big, { level: 1, codec: 'zstd', key });
    await expect(open(stored, [decryptStreamFor({ scheme: 'aes-256-gcm-chunked-v1', frameBytes: LEGACY_FRAME_BYTES }, key), decompressor('zstd')])).rejects.toThrow(/frame 0 claims \d+ bytes \(at most 65536\)/);
  });
});
