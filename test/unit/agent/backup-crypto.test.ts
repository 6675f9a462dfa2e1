import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import {
  createDecryptStream, createEncryptStream, decryptStreamFor, FRAME_BYTES, frameLimitOf, LEGACY_FRAME_BYTES, MAX_FRAME_BYTES, newBackupKey,
} from '../../../agent/backup/backup-crypto.js';

async function collect(src: Buffer, t: NodeJS.ReadWriteStream, pieces = 7): Promise<Buffer> {
  const parts: Buffer[] = [];
  const step = Math.max(1, Math.ceil(src.length / pieces));
  const chunks = Array.from({ length: Math.ceil(src.length / step) }, (_, i) => src.subarray(i * step, (i + 1) * step));
  await pipeline(Readable.from(chunks), t, async function* (s) {
    for await (const c of s) parts.push(c as Buffer);
  });
  return Buffer.concat(parts);
}

/** The frames of an encrypted file: offsets and lengths (header 20 bytes, then u32 | body | tag). */
function frames(enc: Buffer): { at: number; size: number }[] {
  const out: { at: number; size: number }[] = [];
  for (let at = 20; at < enc.length;) {
    const size = 4 + (enc.readUInt32BE(at) & 0x7fff_ffff) + 16;
    out.push({ at, size });
    at += size;
  }
  return out;
}

// Small frames keep these tests fast; the layout is the same at any size.
const SMALL = 1000;

describe('backup encryption (AES-256-GCM frames)', () => {
  const key = newBackupKey();

  it('round-trips empty, small and multi-frame inputs split arbitrarily', async () => {
    for (const n of [0, 1, SMALL - 1, SMALL, SMALL + 1, 3 * SMALL + 17]) {
      const plain = randomBytes(n);
      const enc = await collect(plain, createEncryptStream(key, SMALL));
      expect(enc.includes(plain.subarray(0, Math.min(n, 64))) && n >= 16).toBe(false);
      expect(frames(enc).length).toBe(Math.max(1, Math.ceil(n / SMALL)));
      expect((await collect(enc, createDecryptStream(key), 13)).equals(plain)).toBe(true);
      // One byte at a time: frames spanning every kind of chunk boundary.
      if (n < 2 * SMALL) expect((await collect(enc, createDecryptStream(key), enc.length)).equals(plain)).toBe(true);
    }
  });

  it('writes frames of FRAME_BYTES (1 MiB) by default, and reads them', async () => {
    const plain = randomBytes(FRAME_BYTES + 5);
    const enc = await collect(plain, createEncryptStream(key), 40);
    expect(frames(enc).map((f) => f.size)).toEqual([4 + FRAME_BYTES + 16, 4 + 5 + 16]);
    expect((await collect(enc, createDecryptStream(key, frameLimitOf({ scheme: 'aes-256-gcm-chunked-v1', frameBytes: FRAME_BYTES })), 64)).equals(plain)).toBe(true);
  });

  it('reads an object written in the old format (64 KiB frames, by the agent before frames grew)', async () => {
    // test/fixtures/store/legacy-64k-frames.aes was written by the previous createEncryptStream
    // with the key below: 2 x 64 KiB + 100 bytes of a SHA-256 chain.
    const enc = readFileSync(join(import.meta.dirname, '../../fixtures/store/legacy-64k-frames.aes'));
    const parts: Buffer[] = [];
    let h = Buffer.from('fulcrum legacy frames');
    for (let n = 0; n < 2 * 65536 + 100; n += 32) parts.push(h = createHash('sha256').update(h).digest());
    const plain = Buffer.concat(parts).subarray(0, 2 * 65536 + 100);
    expect(frames(enc).map((f) => f.size)).toEqual([4 + 65536 + 16, 4 + 65536 + 16, 4 + 100 + 16]);
    const oldKey = Buffer.alloc(32, 7).toString('base64');
    // As a reader given an old manifest ({ frameBytes: 65536 }) and one given none.
    expect((await collect(enc, decryptStreamFor({ scheme: 'aes-256-gcm-chunked-v1', frameBytes: LEGACY_FRAME_BYTES }, oldKey), 9)).equals(plain)).toBe(true);
    expect((await collect(enc, decryptStreamFor({ scheme: 'aes-256-gcm-chunked-v1' }, oldKey), 9)).equals(plain)).toBe(true);
  });

  it('two encryptions of the same data differ (per-file salt)', async () => {
    const plain = Buffer.from('same data');
    expect((await collect(plain, createEncryptStream(key))).equals(await collect(plain, createEncryptStream(key)))).toBe(false);
  });

  it('refuses a flipped byte, a wrong key, a truncated file, a dropped frame and trailing bytes', async () => {
    const plain = randomBytes(2 * SMALL + 100);
    const enc = await collect(plain, createEncryptStream(key, SMALL));
    const flipped = Buffer.from(enc);
    flipped[20 + (4 + SMALL + 16) + 100] ^= 0x01;
    const badLength = Buffer.from(enc);
    badLength[20 + (4 + SMALL + 16) + 3] ^= 0x01;
    await expect(collect(badLength, createDecryptStream(key))).rejects.toThrow(/claims|failed authentication|truncated/);
    await expect(collect(flipped, createDecryptStream(key))).rejects.toThrow(/failed authentication/);
    await expect(collect(enc, createDecryptStream(newBackupKey()))).rejects.toThrow(/failed authentication/);
    const frame = 4 + SMALL + 16;
    const dropped = Buffer.concat([enc.subarray(0, 20), enc.subarray(20 + frame)]);
    await expect(collect(dropped, createDecryptStream(key))).rejects.toThrow(/failed authentication/);
    await expect(collect(Buffer.concat([enc, Buffer.from('xxxxxx')]), createDecryptStream(key))).rejects.toThrow(/after the final frame/);
    await expect(collect(Buffer.from('not encrypted at all, just text'), createDecryptStream(key))).rejects.toThrow(/bad header/);
  });

  it('detects truncation at every frame boundary and inside frames', async () => {
    const enc = await collect(randomBytes(3 * SMALL + 50), createEncryptStream(key, SMALL));
    const cuts = [...frames(enc).map((f) => f.at), 20, 21, enc.length - 1, enc.length - 16, frames(enc)[1]!.at + 7];
    for (const cut of cuts) await expect(collect(enc.subarray(0, cut), createDecryptStream(key))).rejects.toThrow(/truncated/);
    // Dropping the final frame leaves whole, authentic frames: still refused, none is marked final.
    const last = frames(enc).at(-1)!;
    await expect(collect(enc.subarray(0, last.at), createDecryptStream(key))).rejects.toThrow(/truncated/);
  });

  it('refuses reordered and duplicated frames', async () => {
    const enc = await collect(randomBytes(3 * SMALL + 50), createEncryptStream(key, SMALL));
    const f = frames(enc).map(({ at, size }) => enc.subarray(at, at + size));
    const head = enc.subarray(0, 20);
    const swapped = Buffer.concat([head, f[1]!, f[0]!, f[2]!, f[3]!]);
    await expect(collect(swapped, createDecryptStream(key))).rejects.toThrow(/frame 0 failed authentication/);
    const lastTwoSwapped = Buffer.concat([head, f[0]!, f[1]!, f[3]!, f[2]!]);
    await expect(collect(lastTwoSwapped, createDecryptStream(key))).rejects.toThrow(/frame 2 failed authentication/);
    const repeated = Buffer.concat([head, f[0]!, f[0]!, f[1]!, f[2]!, f[3]!]);
    await expect(collect(repeated, createDecryptStream(key))).rejects.toThrow(/frame 1 failed authentication/);
    // A frame of another file under the same database key (another salt): refused too.
    const other = await collect(randomBytes(3 * SMALL + 50), createEncryptStream(key, SMALL));
    const spliced = Buffer.concat([head, f[0]!, other.subarray(frames(other)[1]!.at, frames(other)[1]!.at + frames(other)[1]!.size), f[2]!, f[3]!]);
    await expect(collect(spliced, createDecryptStream(key))).rejects.toThrow(/frame 1 failed authentication/);
  });

  it('refuses a frame longer than the limit before buffering it', async () => {
    // A corrupt or hostile object claims a 2 GiB frame: refused on its length word, nothing buffered.
    const huge = Buffer.concat([Buffer.from('FBK1'), randomBytes(16), Buffer.from([0x7f, 0xff, 0xff, 0xff]), randomBytes(100)]);
    let seen = 0;
    const counting = new Transform({ transform(c: Buffer, _e, cb) { seen += c.length; cb(null, c); } });
    await expect(pipeline(Readable.from([huge]), counting, createDecryptStream(key), async function* (s) { for await (const _ of s) yield _; })).rejects.toThrow(/claims 2147483647 bytes/);
    expect(seen).toBe(huge.length);
    // One byte over the manifest's frame size: refused, though under the cap.
    const enc = await collect(randomBytes(SMALL + 1), createEncryptStream(key, SMALL + 1));
    await expect(collect(enc, createDecryptStream(key, SMALL))).rejects.toThrow(/frame 0 claims 1001 bytes \(at most 1000\)/);
    expect((await collect(enc, createDecryptStream(key, SMALL + 1))).length).toBe(SMALL + 1);
    // A manifest cannot raise the cap, nor name another scheme.
    expect(() => frameLimitOf({ scheme: 'aes-256-gcm-chunked-v1', frameBytes: MAX_FRAME_BYTES + 1 })).toThrow(/more than this agent reads/);
    expect(() => frameLimitOf({ scheme: 'aes-256-gcm-chunked-v1', frameBytes: -5 })).toThrow(/more than this agent reads/);
    expect(() => frameLimitOf({ scheme: 'aes-256-gcm-chunked-v9', frameBytes: 1000 })).toThrow(/unknown encryption scheme/);
    expect(() => createDecryptStream(key, MAX_FRAME_BYTES + 1)).toThrow(/not read/);
  });
});
