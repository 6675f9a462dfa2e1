import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import { createDecryptStream, createEncryptStream, FRAME_BYTES, newBackupKey } from '../../../agent/backup/backup-crypto.js';

async function collect(src: Buffer, t: NodeJS.ReadWriteStream, pieces = 7): Promise<Buffer> {
  const parts: Buffer[] = [];
  const step = Math.max(1, Math.ceil(src.length / pieces));
  const chunks = Array.from({ length: Math.ceil(src.length / step) }, (_, i) => src.subarray(i * step, (i + 1) * step));
  await pipeline(Readable.from(chunks), t, async function* (s) {
    for await (const c of s) parts.push(c as Buffer);
  });
  return Buffer.concat(parts);
}

describe('backup encryption (AES-256-GCM frames)', () => {
  const key = newBackupKey();

  it('round-trips empty, small and multi-frame inputs split arbitrarily', async () => {
    for (const n of [0, 1, FRAME_BYTES - 1, FRAME_BYTES, FRAME_BYTES + 1, 3 * FRAME_BYTES + 17]) {
      const plain = randomBytes(n);
      const enc = await collect(plain, createEncryptStream(key));
      expect(enc.includes(plain.subarray(0, Math.min(n, 64))) && n >= 16).toBe(false);
      expect(await collect(enc, createDecryptStream(key), 13)).toEqual(plain);
    }
  });

  it('two encryptions of the same data differ (per-file salt)', async () => {
    const plain = Buffer.from('same data');
    expect((await collect(plain, createEncryptStream(key))).equals(await collect(plain, createEncryptStream(key)))).toBe(false);
  });

  it('refuses a flipped byte, a wrong key, a truncated file, a dropped frame and trailing bytes', async () => {
    const plain = randomBytes(2 * FRAME_BYTES + 100);
    const enc = await collect(plain, createEncryptStream(key));
    const flipped = Buffer.from(enc);
    flipped[20 + (4 + FRAME_BYTES + 16) + 100] ^= 0x01;
    const badLength = Buffer.from(enc);
    badLength[20 + (4 + FRAME_BYTES + 16) + 1] ^= 0x01;
    await expect(collect(badLength, createDecryptStream(key))).rejects.toThrow(/claims|failed authentication/);
    await expect(collect(flipped, createDecryptStream(key))).rejects.toThrow(/failed authentication/);
    await expect(collect(enc, createDecryptStream(newBackupKey()))).rejects.toThrow(/failed authentication/);
    await expect(collect(enc.subarray(0, enc.length - 30), createDecryptStream(key))).rejects.toThrow(/truncated/);
    const frame = 4 + FRAME_BYTES + 16;
    const dropped = Buffer.concat([enc.subarray(0, 20), enc.subarray(20 + frame)]);
    await expect(collect(dropped, createDecryptStream(key))).rejects.toThrow(/failed authentication/);
    await expect(collect(Buffer.concat([enc, Buffer.from('xxxxxx')]), createDecryptStream(key))).rejects.toThrow(/after the final frame/);
    await expect(collect(Buffer.from('not encrypted at all, just text'), createDecryptStream(key))).rejects.toThrow(/bad header/);
  });
});
