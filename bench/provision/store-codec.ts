/**
 * bench/provision, the store's CPU per byte (`npm run bench:provision -- --only codec [--codec-mb 1024]`):
 * what sealing an object for the backup store (compression, AES-256-GCM frames, SHA-256 of the
 * stored bytes) and reading it back (SHA-256, decryption, decompression) costs, before and after
 * dumps and binlog segments moved from gzip -6 to zstd -3 and frames from 64 KiB to 1 MiB, in one
 * run. No store and no server: N MB of a dump-like stream (mariadb-dump's INSERT lines of ~1 KB
 * text rows) and of a binlog-like one (row events: headers, integers, short strings) go from memory
 * through the stages into a file in a temporary folder, then are read back from it in the 16 KiB
 * pieces an HTTPS body delivers. CPU is this process's (the main thread: hashing, encryption; the
 * threadpool: compression), per GB of plain data; MB/s is plain data per wall second.
 *
 *  before: gzip -6, bench/provision/store-codec-before.ts (the old encryption stream, 64 KiB frames);
 *  after:  sealedWriter as the agent calls it (zstd -3, backup-crypto.ts, 1 MiB frames), and the readers' stages.
 */
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, mkdtempSync, rmSync, statSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable, Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip, createGzip } from 'node:zlib';
import { createDecryptStream, newBackupKey } from '../../agent/backup/backup-crypto.js';
import { sealedWriter } from '../../agent/backup/sealed-writer.js';
import { decompressor, STORE_ZSTD_LEVEL } from '../../agent/backup/store-codec.js';
import * as before from './store-codec-before.js';

export interface CodecFigure {
  stream: 'dump' | 'binlog';
  what: string;
  plainMb: number;
  storedMb: number;
  seconds: number;
  cpuPerGb: number;
  load1: number;
}

const BLOCK = 16 * 1024 * 1024;

/** A small deterministic generator (xorshift32): the same data every run. */
function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    return x;
  };
}

const WORDS = 'the of and to in is was for on that with as by at from his an were are which this be or has had not but first one their its new after who they have her she two been other when there all during into school time may years more most only over city some world would where later up such used many can state about national out known university united then made'.split(' ');

function text(r: () => number, bytes: number): string {
  let s = '';
  while (s.length < bytes) s += `${WORDS[r() % WORDS.length]} `;
  return s.slice(0, bytes);
}

/** 16 MiB of mariadb-dump output: multi-row INSERTs of (id, number, ~1 KB text, date). */
function dumpBlock(): Buffer {
  const r = rng(7);
  const out: string[] = [];
  let n = 0;
  let id = 1;
  while (n < BLOCK) {
    const rows: string[] = [];
    for (let i = 0; i < 64; i++, id++) rows.push(`(${id},${r() % 1000000},'${text(r, 900 + (r() % 200))}','2026-11-${String(1 + (r() % 28)).padStart(2, '0')} ${String(r() % 24).padStart(2, '0')}:${String(r() % 60).padStart(2, '0')}:00')`);
    const line = `INSERT INTO \`t\` VALUES ${rows.join(',')};\n`;
    out.push(line);
    n += line.length;
  }
  return Buffer.from(out.join('')).subarray(0, BLOCK);
}

/** 16 MiB of binlog: events of a 19-byte header (time, type, server id, length, position, flags) and row images. */
function binlogBlock(): Buffer {
  const r = rng(11);
  const b = Buffer.alloc(BLOCK);
  let at = 0;
  let ts = 1_790_000_000;
  while (at < BLOCK - 2048) {
    const body = 60 + (r() % 900);
    if (r() % 8 === 0) ts++;
    b.writeUInt32LE(ts, at);
    b[at + 4] = [30, 31, 32, 19, 16][r() % 5]!;
    b.writeUInt32LE(1, at + 5);
    b.writeUInt32LE(19 + body, at + 9);
    b.writeUInt32LE(at + 19 + body, at + 13);
    b.writeUInt16LE(0, at + 17);
    let p = at + 19;
    const end = p + body;
    while (p < end - 40) {
      b.writeUInt32LE(r() % 100000, p); p += 4;
      b.writeUInt32LE(r(), p); p += 4;
      const s = text(r, 8 + (r() % 24));
      b[p++] = s.length;
      p += b.write(s, p, 'latin1');
    }
    at = end;
  }
  return b;
}

/** `mb` MB of `block` repeated, in 64 KiB pieces (what a file read or a tool's stdout gives). */
function source(block: Buffer, mb: number): Readable {
  const total = mb * 1024 * 1024;
  return Readable.from((function* () {
    for (let n = 0; n < total; n += 64 * 1024) {
      const off = n % BLOCK;
      yield block.subarray(off, off + Math.min(64 * 1024, total - n));
    }
  })(), { objectMode: false });
}

const hashTap = () => {
  const h = createHash('sha256');
  return new Transform({ transform(c: Buffer, _e, cb) { h.update(c); cb(null, c); } });
};
const devNull = () => new Writable({ write(_c, _e, cb) { cb(); } });

async function timed(fn: () => Promise<void>): Promise<{ seconds: number; cpu: number }> {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await fn();
  const c = process.cpuUsage(c0);
  return { seconds: (performance.now() - t0) / 1000, cpu: (c.user + c.system) / 1e6 };
}

export async function measureCodec(mb: number, report: (f: CodecFigure) => void): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'fulcrum-bench-codec-'));
  const key = newBackupKey();
  const gb = (mb * 1024 * 1024) / 1e9;
  try {
    for (const stream of ['dump', 'binlog'] as const) {
      const block = stream === 'dump' ? dumpBlock() : binlogBlock();
      const fig = (what: string, file: string, t: { seconds: number; cpu: number }) => report({
        stream, what, plainMb: mb, storedMb: statSync(file).size / 1e6, seconds: t.seconds, cpuPerGb: t.cpu / gb, load1: loadavg()[0]!,
      });
      const oldFile = join(dir, `${stream}.gz.aes`);
      const newFile = join(dir, `${stream}.zst.aes`);
      fig('write, before: gzip -6 + 64 KiB frames', oldFile, await timed(() => pipeline(source(block, mb), createGzip({ level: 6 }), before.createEncryptStream(key), hashTap(), createWriteStream(oldFile))));
      fig(`write, after: zstd -${STORE_ZSTD_LEVEL} + 1 MiB frames (sealedWriter)`, newFile, await timed(async () => {
        const sealed = sealedWriter(createWriteStream(newFile), { level: STORE_ZSTD_LEVEL, codec: 'zstd', key });
        await pipeline(source(block, mb), sealed.input);
        await sealed.done;
      }));
      const read = (file: string) => createReadStream(file, { highWaterMark: 16 * 1024 });
      fig('read, before: 64 KiB frames + gunzip', oldFile, await timed(() => pipeline(read(oldFile), hashTap(), before.createDecryptStream(key), createGunzip(), devNull())));
      fig('read, after: 1 MiB frames + zstd', newFile, await timed(() => pipeline(read(newFile), hashTap(), createDecryptStream(key), decompressor('zstd'), devNull())));
      // The decryption alone (per GB of plain data, as above): the old code on its file, the new code on the old file (fewer copies only), the new code on its own.
      fig('decrypt only, before (old code, 64 KiB frames)', oldFile, await timed(() => pipeline(read(oldFile), before.createDecryptStream(key), devNull())));
      fig('decrypt only, new code on the 64 KiB-frame file', oldFile, await timed(() => pipeline(read(oldFile), createDecryptStream(key), devNull())));
      fig('decrypt only, after (1 MiB frames)', newFile, await timed(() => pipeline(read(newFile), createDecryptStream(key), devNull())));
      rmSync(oldFile);
      rmSync(newFile);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `npx tsx bench/provision/store-codec.ts [MB]`: the same part without the rest of bench:provision. */
if (process.argv[1]?.endsWith('store-codec.ts') || process.argv[1]?.endsWith('store-codec.js')) {
  await measureCodec(Number(process.argv[2] ?? 1024), (f) => console.log(`${f.stream}: ${f.what}: ${f.seconds.toFixed(1)} s, ${(f.plainMb * 1.048576 / f.seconds).toFixed(0)} MB/s, ${f.storedMb.toFixed(1)} MB stored, ${f.cpuPerGb.toFixed(2)} CPU s/GB, load ${f.load1.toFixed(1)}`));
}
