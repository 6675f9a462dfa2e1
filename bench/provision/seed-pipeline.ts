/**
 * bench/provision, the fork's download-and-unpack pipeline alone (agent/binlog/physical-seed.ts):
 * where the seconds of "unpack" go for a physical base of N MB, stage by stage, on the same
 * stored objects. A synthetic mbstream of N MB of ~1 KB text rows (the fork bench's row shape,
 * about 2x under gzip -1 as the real bases are) is sealed as the archive seals a base, once per
 * codec (CODECS=gzip,zstd: gzip -1 as bases were written, zstd -1 as they are now; AES-256-GCM
 * frames) and uploaded to the tests' own Swift + s3api store over TLS; then each is read back
 * through the agent's S3 adapter, each run adding one stage: download + SHA-256, + decrypt, +
 * decompress, + `mbstream -x` into a folder (the whole pipeline as seedPhysical runs it:
 * `streamBase`). Wall seconds, this process's CPU seconds (download, hash, decrypt and the
 * decompression in the threadpool) and the children's (mbstream), per GB of data.
 *
 *   npx tsx bench/provision/seed-pipeline.ts [MB] [rounds]      (STAGES=mbstream: that stage only)
 */
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable, Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip, createZstdDecompress } from 'node:zlib';
import { createDecryptStream } from '../../agent/backup/backup-crypto.js';
import { sealedWriter } from '../../agent/backup/sealed-writer.js';
import { createS3Stores, loadStoreCredentials, parseStoreUrl } from '../../agent/backup/s3-store.js';
import { streamBase } from '../../agent/binlog/physical-seed.js';
import { startObjectStore } from '../../test/helpers/object-store.js';

const MB = Number(process.argv[2] ?? 1000);
const ROUNDS = Number(process.argv[3] ?? 1);
const KEY = randomBytes(32).toString('base64');
const words = ['alpha', 'bravo', 'charlie', 'delta', 'echo', 'foxtrot', 'golf', 'hotel', 'india', 'juliet'];

/** About 1 MB of rows like the fork bench's (words, numbers, 16 hex digits of an MD5). */
function rows(): Buffer {
  const parts: string[] = [];
  let n = 0;
  while (n < 1 << 20) {
    const r: string[] = [];
    for (let i = 0; i < 32; i++) r.push(`${words[(Math.random() * 10) | 0]}=${(Math.random() * 100000) | 0}:${randomBytes(8).toString('hex')}`);
    const line = `${words[(Math.random() * 10) | 0]},${(Math.random() * 1e6) | 0},${r.join(' ')}\n`;
    parts.push(line);
    n += line.length;
  }
  return Buffer.from(parts.join(''));
}

/** Children's CPU seconds so far (reaped ones, from /proc/self/stat's cutime + cstime). */
async function childCpu(): Promise<number> {
  const { readFileSync } = await import('node:fs');
  const raw = readFileSync('/proc/self/stat', 'utf8');
  const f = raw.slice(raw.lastIndexOf(')') + 2).split(' ');
  return (Number(f[13]) + Number(f[14])) / 100;
}

const devNull = () => new Writable({ write(_c, _e, cb) { cb(); } });

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'seed-pipeline-'));
  const store = await startObjectStore({ host: '127.86.1.1' });
  const stores = createS3Stores({ ...parseStoreUrl(`s3://${store.bucket}/b`), endpoint: store.endpoint, region: store.region, pathStyle: true, ca: store.ca, credentials: loadStoreCredentials(store.credentialsFile) });
  try {
    // The "data directory": one big table file and a few small ones, streamed by mbstream -c.
    const src = join(dir, 'src');
    mkdirSync(join(src, 'app'), { recursive: true });
    const block = rows();
    const { createWriteStream } = await import('node:fs');
    await pipeline(Readable.from((function* () { for (let i = 0; i < MB; i++) yield i % 7 === 0 ? rows() : block.subarray(i % 4096, (i % 4096) + (1 << 20) - 4096); })()), createWriteStream(join(src, 'app', 't.ibd')));
    for (const f of ['ibdata1', 'undo001', 'xtrabackup_checkpoints']) writeFileSync(join(src, f), randomBytes(1 << 20));
    const codecs = (process.env.CODECS ?? 'gzip,zstd').split(',') as ('gzip' | 'zstd')[];
    const sums = new Map<string, string>();
    for (const [i, codec] of codecs.entries()) {
      const mk = spawn('mbstream', ['-c', '-C', src, 'app/t.ibd', 'ibdata1', 'undo001', 'xtrabackup_checkpoints'], { stdio: ['ignore', 'pipe', 'inherit'] });
      const sealed = sealedWriter(await stores.backups.writer(1, i + 1, 'base'), { level: 1, codec, key: KEY });
      const t0 = Date.now();
      const c0 = process.cpuUsage();
      await pipeline(mk.stdout, sealed.input);
      const { sizeBytes, sha256 } = await sealed.done;
      const c = process.cpuUsage(c0);
      sums.set(codec, sha256);
      console.log(`base (${codec} -1): ${MB} MB of data, ${(sizeBytes / 1048576).toFixed(1)} MB stored, sealed and uploaded in ${((Date.now() - t0) / 1000).toFixed(1)} s, node CPU ${((c.user + c.system) / 1e6 / (MB / 1024)).toFixed(1)} s/GB; load ${loadavg()[0]!.toFixed(1)}; ${new Date().toISOString()}`);
    }

    const run = async (what: string, want: string, body: () => Promise<string | void>) => {
      const c0 = process.cpuUsage();
      const k0 = await childCpu();
      const t0 = Date.now();
      const got = await body();
      const s = (Date.now() - t0) / 1000;
      const c = process.cpuUsage(c0);
      const node = (c.user + c.system) / 1e6;
      const kids = (await childCpu()) - k0;
      const gb = MB / 1024;
      if (got && got !== want) throw new Error(`${what}: checksum differs`);
      console.log(`${what.padEnd(52)} ${s.toFixed(1).padStart(6)} s  node CPU ${(node / gb).toFixed(1).padStart(5)} s/GB  children ${(kids / gb).toFixed(1).padStart(5)} s/GB  load ${loadavg()[0]!.toFixed(1)}`);
    };
    const hashTap = (h: ReturnType<typeof createHash>) => new Transform({ transform(chunk: Buffer, _e, cb) { h.update(chunk); cb(null, chunk); } });
    const inflate = (codec: 'gzip' | 'zstd') => (codec === 'zstd' ? createZstdDecompress({ chunkSize: 256 * 1024 }) : createGunzip({ chunkSize: 256 * 1024 }));
    const stages = (codec: 'gzip' | 'zstd', id: number): Record<string, () => Promise<string>> => ({
      'download + sha256': async () => { const h = createHash('sha256'); await pipeline(stores.backups.reader(1, id, 'base'), hashTap(h), devNull()); return h.digest('hex'); },
      '+ decrypt': async () => { const h = createHash('sha256'); await pipeline(stores.backups.reader(1, id, 'base'), hashTap(h), createDecryptStream(KEY), devNull()); return h.digest('hex'); },
      '+ decompress': async () => { const h = createHash('sha256'); await pipeline(stores.backups.reader(1, id, 'base'), hashTap(h), createDecryptStream(KEY), inflate(codec), devNull()); return h.digest('hex'); },
      '+ mbstream -x (streamBase, as seedPhysical)': async () => {
        const out = join(dir, 'out');
        rmSync(out, { recursive: true, force: true });
        mkdirSync(out);
        const r = await streamBase(stores.backups.reader(1, id, 'base'), { key: KEY, codec }, (stdin) => new Promise((resolve) => {
          const x = spawn('mbstream', ['-x', '-C', out], { stdio: ['pipe', 'ignore', 'pipe'] });
          let stderr = '';
          x.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
          stdin.pipe(x.stdin);
          x.stdin.on('error', () => undefined);
          x.on('close', (code) => resolve({ exitCode: code ?? 1, stderr }));
        }));
        rmSync(out, { recursive: true, force: true });
        if (r.exitCode !== 0 || r.readError) throw new Error(`unpack failed: ${r.readError?.message ?? r.stderr}`);
        return r.sha256;
      },
    });
    const only = process.env.STAGES?.split(',');
    for (let i = 0; i < ROUNDS; i++) {
      for (const [j, codec] of codecs.entries()) {
        for (const [name, fn] of Object.entries(stages(codec, j + 1))) if (!only || only.some((o) => name.includes(o))) await run(`${codec}: ${name}`, sums.get(codec)!, fn);
      }
    }
  } finally {
    stores.close();
    await store.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err) => { console.error(err); process.exitCode = 1; });
