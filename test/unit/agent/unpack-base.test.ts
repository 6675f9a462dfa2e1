/**
 * The fork's one-read pipeline for a physical base (streamBase, agent/binlog/physical-seed.ts):
 * bases written with zstd now and with gzip before both reach mbstream's stdin as the sealed
 * input, with the SHA-256 of the stored bytes; a changed byte in an encrypted base breaks the
 * read (the caller then names the corruption from the whole object's checksum).
 * An extractor that cannot start fails the unpack and the stored object is closed.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { newBackupKey } from '../../../agent/backup/backup-crypto.js';
import { sealedWriter } from '../../../agent/backup/sealed-writer.js';
import { streamBase } from '../../../agent/binlog/physical-seed.js';

const plain = Buffer.concat([Buffer.from('mbstream-ish page\n'.repeat(40_000)), randomBytes(400_000)]);

async function seal(o: { codec?: 'gzip' | 'zstd'; key?: string }): Promise<Buffer> {
  const out = new PassThrough();
  const chunks: Buffer[] = [];
  out.on('data', (c: Buffer) => chunks.push(c));
  const w = sealedWriter(out, { level: 1, ...o });
  w.input.end(plain);
  await w.done;
  return Buffer.concat(chunks);
}

/** What the extractor (mbstream -x in the agent) receives, read to its end. */
async function extracted(stored: Buffer, o: { key?: string; codec: 'gzip' | 'zstd' }) {
  let got = Buffer.alloc(0);
  const r = await streamBase(Readable.from([stored.subarray(0, 100_000), stored.subarray(100_000)]), o, async (stdin) => {
    const chunks: Buffer[] = [];
    try {
      for await (const c of stdin) chunks.push(c as Buffer);
    } catch (err) {
      // As the agent's exec does: an input that broke stops the program, which fails.
      return { exitCode: 1, stderr: `input failed: ${(err as Error).message}` };
    } finally {
      got = Buffer.concat(chunks);
    }
    return { exitCode: 0, stderr: '' };
  });
  return { ...r, got };
}

describe('streamBase: one read of a stored physical base', () => {
  for (const codec of ['zstd', 'gzip'] as const) {
    for (const encrypted of [true, false]) {
      it(`${codec}${encrypted ? ' + AES-256-GCM' : ''}: the input reaches the extractor whole, with the stored bytes' checksum`, async () => {
        const key = encrypted ? newBackupKey() : undefined;
        const stored = await seal({ codec, key });
        const r = await extracted(stored, { codec, key });
        expect(r.readError).toBeUndefined();
        expect(r.got.equals(plain)).toBe(true);
        expect(r.sha256).toBe(createHash('sha256').update(stored).digest('hex'));
      });
    }
  }

  it('a changed byte in the middle of an encrypted base fails the read and the extractor', async () => {
    const key = newBackupKey();
    const stored = await seal({ codec: 'zstd', key });
    const bad = Buffer.from(stored);
    bad[bad.length >> 1] ^= 0xff;
    const r = await extracted(bad, { codec: 'zstd', key });
    expect(r.readError?.message).toMatch(/failed authentication/);
    expect(r.exitCode).not.toBe(0);
    expect(r.got.equals(plain)).toBe(false);
  });
});

describe('a base whose extractor cannot start', () => {
  it('fails with the extractor\'s error and closes the stored object instead of holding it open behind a full pipe', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fulcrum-unpack-'));
    try {
      // Far more than the pipeline's buffers hold: unread, the file would stay open mid-read.
      const file = join(dir, 'base.mbstream.zst');
      writeFileSync(file, Buffer.concat(await Promise.all(Array.from({ length: 8 }, () => seal({ codec: 'zstd' })))));
      const src = createReadStream(file);
      const closed = new Promise<void>((resolve) => src.once('close', () => resolve()));
      await expect(streamBase(src, { codec: 'zstd' }, async () => {
        throw new Error('node gone');
      })).rejects.toThrow('node gone');
      await closed;
      expect(src.destroyed).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
