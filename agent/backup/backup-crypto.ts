import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';

/** The scheme name recorded in a backup manifest. */
export const BACKUP_CIPHER = 'aes-256-gcm-chunked-v1';

const MAGIC = Buffer.from('FBK1');
const SALT_BYTES = 16;
/**
 * Plaintext bytes per frame of what is written from now on (manifest `encryption.frameBytes`).
 * 1 MiB: each frame costs a cipher set-up, a tag and a few Buffers, which at the 64 KiB of
 * older files was a large part of the decryption's CPU (docs/performance.md, "Store CPU"); a
 * frame is still small enough to stream and to hold whole while its tag is checked.
 */
export const FRAME_BYTES = 1024 * 1024;
/** The frame size of files written before FRAME_BYTES grew (and of manifests that do not say). */
export const LEGACY_FRAME_BYTES = 64 * 1024;
/**
 * The largest frame a reader accepts, whatever a file or its manifest claims: what a corrupt or
 * hostile object can make the reader buffer (one frame, plus the input chunk it arrived in).
 */
export const MAX_FRAME_BYTES = FRAME_BYTES;
const TAG_BYTES = 16;
const FINAL_BIT = 0x8000_0000;

/** A fresh per-database backup key (base64 of 32 random bytes), kept in the database's state. */
export function newBackupKey(): string {
  return randomBytes(32).toString('base64');
}

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
 * Bytes received but not used yet, kept as the chunks they came in: a frame's ciphertext is
 * handed to the decipher piece by piece, never copied into one Buffer first.
 */
class ByteQueue {
  private chunks: Buffer[] = [];
  /** Index of the first chunk still queued (shifting an array of many tiny chunks would be quadratic). */
  private first = 0;
  length = 0;

  push(b: Buffer): void {
    if (b.length === 0) return;
    this.chunks.push(b);
    this.length += b.length;
  }

  /** The next n bytes (n <= length) as pieces of the queued chunks, removed from the queue. */
  take(n: number): Buffer[] {
    const out: Buffer[] = [];
    this.length -= n;
    while (n > 0) {
      const c = this.chunks[this.first]!;
      if (c.length <= n) {
        out.push(c);
        this.first++;
        n -= c.length;
      } else {
        out.push(c.subarray(0, n));
        this.chunks[this.first] = c.subarray(n);
        n = 0;
      }
    }
    if (this.first === this.chunks.length) {
      this.chunks = [];
      this.first = 0;
    } else if (this.first > 1024) {
      this.chunks = this.chunks.slice(this.first);
      this.first = 0;
    }
    return out;
  }

  /** The next n bytes (n <= length, small: headers and tags) as one Buffer, removed. */
  read(n: number): Buffer {
    const parts = this.take(n);
    return parts.length === 1 ? parts[0]! : Buffer.concat(parts, n);
  }

  /** The big-endian u32 at the front (length >= 4), not removed. */
  peekUInt32(): number {
    const c = this.chunks[this.first]!;
    if (c.length >= 4) return c.readUInt32BE(0);
    const word = this.read(4);
    this.chunks.splice(this.first, 0, word);
    this.length += 4;
    return word.readUInt32BE(0);
  }
}

/**
 * Encrypts a byte stream with AES-256-GCM in frames of at most `frameBytes` (FRAME_BYTES unless
 * a test asks for another size), so a dump of any size streams through in bounded memory.
 * Layout: `FBK1`, 16-byte salt, then frames of `u32be length (top bit: final) | ciphertext |
 * 16-byte tag`. The last frame (possibly empty) carries the final bit. The frame size is not in
 * the file: a reader accepts any frame up to its limit (the manifest's frameBytes).
 */
export function createEncryptStream(key: string, frameBytes: number = FRAME_BYTES): Transform {
  if (!Number.isInteger(frameBytes) || frameBytes < 1 || frameBytes > MAX_FRAME_BYTES) throw new Error(`frames of ${frameBytes} bytes are not written`);
  const salt = randomBytes(SALT_BYTES);
  const k = fileKey(key, salt);
  let counter = 0;
  const pending = new ByteQueue();
  let headerSent = false;
  // The ciphertext goes out as the plaintext pieces came in (no copy into one frame Buffer);
  // the length word first, the tag last.
  const frame = (t: Transform, len: number, final: boolean) => {
    const c = createCipheriv('aes-256-gcm', k, nonce(counter));
    c.setAAD(aad(counter, final));
    counter++;
    const head = Buffer.allocUnsafe(4);
    head.writeUInt32BE((len | (final ? FINAL_BIT : 0)) >>> 0);
    t.push(head);
    for (const piece of pending.take(len)) t.push(c.update(piece));
    c.final();
    t.push(c.getAuthTag());
  };
  const header = (t: Transform) => {
    if (!headerSent) t.push(Buffer.concat([MAGIC, salt]));
    headerSent = true;
  };
  return new Transform({
    transform(chunk: Buffer, _enc, cb: TransformCallback) {
      header(this);
      pending.push(chunk);
      // A full frame is written once a byte beyond it is known: only then is it certain not to be the last.
      while (pending.length > frameBytes) frame(this, frameBytes, false);
      cb();
    },
    flush(cb: TransformCallback) {
      header(this);
      frame(this, pending.length, true);
      cb();
    },
  });
}

/**
 * The inverse of createEncryptStream. Fails (stream error) on a wrong key, a changed byte, a
 * missing or reordered frame, a truncated file, bytes after the final frame or a frame longer
 * than `maxFrameBytes` (at most MAX_FRAME_BYTES: what it buffers is bounded by that whatever
 * the file says); nothing of a frame is passed on before its tag has been checked.
 */
export function createDecryptStream(key: string, maxFrameBytes: number = MAX_FRAME_BYTES): Transform {
  if (!Number.isInteger(maxFrameBytes) || maxFrameBytes < 1 || maxFrameBytes > MAX_FRAME_BYTES) throw new Error(`frames of ${maxFrameBytes} bytes are not read (at most ${MAX_FRAME_BYTES})`);
  const q = new ByteQueue();
  let k: Buffer | undefined;
  let counter = 0;
  let done = false;
  return new Transform({
    transform(chunk: Buffer, _enc, cb: TransformCallback) {
      q.push(chunk);
      try {
        if (!k) {
          if (q.length < MAGIC.length + SALT_BYTES) return cb();
          const head = q.read(MAGIC.length + SALT_BYTES);
          if (!head.subarray(0, MAGIC.length).equals(MAGIC)) throw new Error('not an encrypted Fulcrum backup (bad header)');
          k = fileKey(key, head.subarray(MAGIC.length));
        }
        while (q.length >= 4) {
          if (done) throw new Error('data after the final frame');
          const word = q.peekUInt32();
          const final = (word & FINAL_BIT) !== 0;
          const len = word & ~FINAL_BIT;
          if (len > maxFrameBytes) throw new Error(`frame ${counter} claims ${len} bytes (at most ${maxFrameBytes})`);
          if (q.length < 4 + len + TAG_BYTES) break;
          q.take(4);
          const d = createDecipheriv('aes-256-gcm', k, nonce(counter));
          d.setAAD(aad(counter, final));
          const plain: Buffer[] = [];
          for (const piece of q.take(len)) plain.push(d.update(piece));
          d.setAuthTag(q.read(TAG_BYTES));
          try {
            d.final();
          } catch {
            throw new Error(`frame ${counter} failed authentication (wrong key or changed data)`);
          }
          counter++;
          if (final) done = true;
          for (const p of plain) if (p.length > 0) this.push(p);
        }
        cb();
      } catch (err) {
        cb(err as Error);
      }
    },
    flush(cb: TransformCallback) {
      if (!done || q.length > 0) cb(new Error('the encrypted backup is truncated'));
      else cb();
    },
  });
}

/**
 * The frame size a reader holds a stored object's frames to, from its manifest's `encryption`:
 * its scheme must be this one, and its frameBytes (LEGACY_FRAME_BYTES when it does not say) may
 * not exceed MAX_FRAME_BYTES. Throws, naming what is wrong, otherwise.
 */
export function frameLimitOf(encryption: { scheme: string; frameBytes?: number } | undefined): number {
  if (encryption?.scheme !== BACKUP_CIPHER) throw new Error(`an unknown encryption scheme ${encryption?.scheme ?? '(none)'}`);
  const frameBytes = encryption.frameBytes ?? LEGACY_FRAME_BYTES;
  if (!Number.isInteger(frameBytes) || frameBytes < 1 || frameBytes > MAX_FRAME_BYTES) throw new Error(`frames of ${String(frameBytes)} bytes, more than this agent reads (${MAX_FRAME_BYTES})`);
  return frameBytes;
}

/** The decrypting stage for a stored object whose manifest says `encryption` (frameLimitOf). */
export function decryptStreamFor(encryption: { scheme: string; frameBytes?: number } | undefined, key: string): Transform {
  return createDecryptStream(key, frameLimitOf(encryption));
}
