/**
 * The encryption stream as the agent had it before frames grew to 1 MiB (64 KiB frames, each
 * input chunk concatenated onto what was buffered, each frame copied twice on the way out):
 * kept only so that bench/provision/store-codec.ts measures before and after in one run. The
 * agent's code is agent/backup/backup-crypto.ts; the bytes this writes are the format it still reads.
 */
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';

const MAGIC = Buffer.from('FBK1');
const SALT_BYTES = 16;
/** Plaintext bytes per frame: large enough to keep the overhead small, small enough to stream. */
export const FRAME_BYTES = 64 * 1024;
const TAG_BYTES = 16;
const FINAL_BIT = 0x8000_0000;

/**
 * Each file gets its own key from the database key and a random salt (HKDF), so frame nonces
 * can simply count from 0 without ever repeating under one key.
 */
function fileKey(key: string, salt: Buffer): Buffer {
  const raw = Buffer.from(key, 'base64');
  if (raw.length !== 32) throw new Error('the backup key is not 32 bytes');
  return Buffer.from(hkdfSync('sha256', raw, salt, 'fulcrum backup v1', 32));
}

function nonce(counter: number): Buffer {
  const n = Buffer.alloc(12);
  n.writeUInt32BE(Math.floor(counter / 2 ** 32), 4);
  n.writeUInt32BE(counter >>> 0, 8);
  return n;
}

/** The frame's position and whether it is the last one are authenticated: no reordering, no truncation. */
function aad(counter: number, final: boolean): Buffer {
  const a = Buffer.alloc(9);
  a.writeUInt32BE(Math.floor(counter / 2 ** 32), 0);
  a.writeUInt32BE(counter >>> 0, 4);
  a[8] = final ? 1 : 0;
  return a;
}

/**
 * Encrypts a byte stream with AES-256-GCM in frames of at most FRAME_BYTES, so a dump of any
 * size streams through in bounded memory. Layout: `FBK1`, 16-byte salt, then frames of
 * `u32be length (top bit: final) | ciphertext | 16-byte tag`. The last frame (possibly empty)
 * carries the final bit.
 */
export function createEncryptStream(key: string): Transform {
  const salt = randomBytes(SALT_BYTES);
  const k = fileKey(key, salt);
  let counter = 0;
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let headerSent = false;
  const frame = (plain: Buffer, final: boolean): Buffer => {
    const c = createCipheriv('aes-256-gcm', k, nonce(counter));
    c.setAAD(aad(counter, final));
    counter++;
    const body = Buffer.concat([c.update(plain), c.final()]);
    const head = Buffer.alloc(4);
    head.writeUInt32BE((body.length | (final ? FINAL_BIT : 0)) >>> 0);
    return Buffer.concat([head, body, c.getAuthTag()]);
  };
  const header = (t: Transform) => {
    if (!headerSent) t.push(Buffer.concat([MAGIC, salt]));
    headerSent = true;
  };
  return new Transform({
    transform(chunk: Buffer, _enc, cb: TransformCallback) {
      header(this);
      pending.push(chunk);
      pendingBytes += chunk.length;
      if (pendingBytes > FRAME_BYTES) {
        let all = Buffer.concat(pending);
        while (all.length > FRAME_BYTES) {
          this.push(frame(all.subarray(0, FRAME_BYTES), false));
          all = all.subarray(FRAME_BYTES);
        }
        pending = [all];
        pendingBytes = all.length;
      }
      cb();
    },
    flush(cb: TransformCallback) {
      header(this);
      this.push(frame(Buffer.concat(pending), true));
      pending = [];
      cb();
    },
  });
}

/**
 * The inverse of createEncryptStream. Fails (stream error) on a wrong key, a changed byte, a
 * missing or reordered frame, a truncated file or bytes after the final frame; nothing of a
 * frame is passed on before its tag has been checked.
 */
export function createDecryptStream(key: string): Transform {
  let buf: Buffer = Buffer.alloc(0);
  let k: Buffer | undefined;
  let counter = 0;
  let done = false;
  return new Transform({
    transform(chunk: Buffer, _enc, cb: TransformCallback) {
      buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
      try {
        if (!k) {
          if (buf.length < MAGIC.length + SALT_BYTES) return cb();
          if (!buf.subarray(0, MAGIC.length).equals(MAGIC)) throw new Error('not an encrypted Fulcrum backup (bad header)');
          k = fileKey(key, buf.subarray(MAGIC.length, MAGIC.length + SALT_BYTES));
          buf = buf.subarray(MAGIC.length + SALT_BYTES);
        }
        while (buf.length >= 4) {
          if (done) throw new Error('data after the final frame');
          const word = buf.readUInt32BE(0);
          const final = (word & FINAL_BIT) !== 0;
          const len = word & ~FINAL_BIT;
          if (len > FRAME_BYTES) throw new Error(`frame ${counter} claims ${len} bytes`);
          if (buf.length < 4 + len + TAG_BYTES) break;
          const d = createDecipheriv('aes-256-gcm', k, nonce(counter));
          d.setAAD(aad(counter, final));
          d.setAuthTag(buf.subarray(4 + len, 4 + len + TAG_BYTES));
          let plain: Buffer;
          try {
            plain = Buffer.concat([d.update(buf.subarray(4, 4 + len)), d.final()]);
          } catch {
            throw new Error(`frame ${counter} failed authentication (wrong key or changed data)`);
          }
          counter++;
          buf = buf.subarray(4 + len + TAG_BYTES);
          if (final) done = true;
          if (plain.length > 0) this.push(plain);
        }
        cb();
      } catch (err) {
        cb(err as Error);
      }
    },
    flush(cb: TransformCallback) {
      if (!done || buf.length > 0) cb(new Error('the encrypted backup is truncated'));
      else cb();
    },
  });
}
