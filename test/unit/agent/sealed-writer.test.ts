import { createHash, randomBytes } from 'node:crypto';
import { PassThrough, Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip, gzipSync, zstdDecompressSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { createDecryptStream, newBackupKey } from '../../../agent/backup/backup-crypto.js';
import { sealedWriter } from '../../../agent/backup/sealed-writer.js';

/** Collects what a writable receives. */
function sink(): { out: PassThrough; bytes: () => Buffer } {
  const out = new PassThrough();
  const chunks: Buffer[] = [];
  out.on('data', (c: Buffer) => chunks.push(c));
  return { out, bytes: () => Buffer.concat(chunks) };
}

async function read(src: Buffer, decrypt: NodeJS.ReadWriteStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  const out = new PassThrough();
  out.on('data', (c: Buffer) => chunks.push(c));
  await pipeline(Readable.from([src]), decrypt, createGunzip(), out);
  return Buffer.concat(chunks);
}

describe('the sealed writer shared by backups, physical bases and binlog segments', () => {
  // Half compressible text, half random bytes, over several gzip and encryption frames.
  const plain = Buffer.concat([Buffer.from('INSERT INTO t VALUES (1);\n'.repeat(20_000)), randomBytes(300_000)]);

  it('stores exactly gzip of the input (the format older backups have), with its size and SHA-256', async () => {
    const s = sink();
    const w = sealedWriter(s.out, { level: 6 });
    w.input.end(plain);
    const got = await w.done;
    const stored = s.bytes();
    expect(stored.equals(gzipSync(plain, { level: 6 }))).toBe(true);
    expect(got).toEqual({ sizeBytes: stored.length, sha256: createHash('sha256').update(stored).digest('hex') });
  });

  it('with a key: the existing decryption and gunzip give the input back, and the hash is of the stored bytes', async () => {
    const key = newBackupKey();
    const s = sink();
    const w = sealedWriter(s.out, { level: 1, key });
    for (let i = 0; i < plain.length; i += 70_000) w.input.write(plain.subarray(i, i + 70_000));
    w.input.end();
    const got = await w.done;
    const stored = s.bytes();
    expect(got.sizeBytes).toBe(stored.length);
    expect(got.sha256).toBe(createHash('sha256').update(stored).digest('hex'));
    expect((await read(stored, createDecryptStream(key))).equals(plain)).toBe(true);
    await expect(read(stored, createDecryptStream(newBackupKey()))).rejects.toThrow(/failed authentication/);
  });

  it('with zstd (physical bases) and a key: decryption and zstd give the input back', async () => {
    const key = newBackupKey();
    const s = sink();
    const w = sealedWriter(s.out, { level: 1, codec: 'zstd', key });
    w.input.end(plain);
    const got = await w.done;
    const stored = s.bytes();
    expect(got.sha256).toBe(createHash('sha256').update(stored).digest('hex'));
    const chunks: Buffer[] = [];
    const out = new PassThrough();
    out.on('data', (c: Buffer) => chunks.push(c));
    await pipeline(Readable.from([stored]), createDecryptStream(key), out);
    const compressed = Buffer.concat(chunks);
    // zstd's frame magic, not gzip's.
    expect(compressed.subarray(0, 4).equals(Buffer.from([0x28, 0xb5, 0x2f, 0xfd]))).toBe(true);
    expect(zstdDecompressSync(compressed).equals(plain)).toBe(true);
  });

  it('a storage that fails rejects `done`, and a producer that never awaits it leaves no unhandled rejection', async () => {
    const s = sink();
    const w = sealedWriter(s.out, { level: 6 });
    s.out.destroy(new Error('disk full'));
    await expect(w.done).rejects.toThrow('disk full');
  });
});
