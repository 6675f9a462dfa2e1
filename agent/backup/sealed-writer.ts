import { createHash } from 'node:crypto';
import { Transform, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createEncryptStream } from './backup-crypto.js';
import { compressor, type Codec } from './store-codec.js';

/** What was stored: the size and SHA-256 of the bytes as they sit in storage. */
export interface Sealed {
  sizeBytes: number;
  sha256: string;
}

/**
 * The one way backups, physical bases and binlog segments are written (docs/agent.md §6): `codec`
 * (zstd for everything the agent writes; gzip, the default, only for tests writing an old-format
 * object) at `level`, then AES-256-GCM with `key` when one is given (backup-crypto.ts), then a tap that
 * hashes and counts the stored bytes, into `out`. Write the plain bytes to `input`; `done`
 * settles once `out` has everything (or with the first error of any stage). Its rejection is
 * marked handled here, because callers often run the producer before awaiting it; awaiting it
 * still throws.
 */
export function sealedWriter(out: Writable, o: { level: number; key?: string | undefined; codec?: Codec }): { input: Writable; done: Promise<Sealed> } {
  const hash = createHash('sha256');
  let sizeBytes = 0;
  const tap = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      hash.update(chunk);
      sizeBytes += chunk.length;
      cb(null, chunk);
    },
  });
  const input = compressor(o.codec ?? 'gzip', o.level);
  const done = (o.key !== undefined ? pipeline(input, createEncryptStream(o.key), tap, out) : pipeline(input, tap, out))
    .then(() => ({ sizeBytes, sha256: hash.digest('hex') }));
  done.catch(() => undefined);
  return { input, done };
}
