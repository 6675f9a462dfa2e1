import type { Transform } from 'node:stream';
import { constants, createGunzip, createGzip, createZstdCompress, createZstdDecompress } from 'node:zlib';

/**
 * How a stored object (dump, physical base, binlog segment) is compressed: zstd for everything
 * written now; gzip for what older agents wrote, still read. zstd compresses a dump several times
 * faster than gzip -6 and decompresses it for a fraction of inflate's CPU (docs/performance.md,
 * "Store CPU").
 */
export type Codec = 'gzip' | 'zstd';

/** zstd's level for logical dumps and binlog segments (its default: faster than gzip -6 and smaller). */
export const STORE_ZSTD_LEVEL = 3;

/**
 * Output chunks of the compressor and decompressor: 64 KiB instead of zlib's 16 KiB, so the
 * stages after them (encryption, hashing, the upload, the client reading a restore) see 4x fewer
 * pieces.
 */
const CHUNK = 64 * 1024;

/** What a manifest's `format` says: `<kind>+<codec>` with `+aes-256-gcm` when encrypted. */
export interface StoredFormat {
  kind: 'mariadb-dump' | 'binlog' | 'mariadb-backup+mbstream';
  codec: Codec;
  encrypted: boolean;
}

/** Parses a manifest's format; undefined for one this agent does not know. */
export function storedFormat(format: string): StoredFormat | undefined {
  const f = /^(mariadb-dump|binlog|mariadb-backup\+mbstream)\+(gzip|zstd)(\+aes-256-gcm)?$/.exec(format);
  return f ? { kind: f[1] as StoredFormat['kind'], codec: f[2] as Codec, encrypted: f[3] !== undefined } : undefined;
}

/** The format string of what is written with `codec`, encrypted or not. */
export function formatOf<K extends StoredFormat['kind'], C extends Codec>(kind: K, codec: C, encrypted: boolean): `${K}+${C}` | `${K}+${C}+aes-256-gcm` {
  return encrypted ? `${kind}+${codec}+aes-256-gcm` : `${kind}+${codec}`;
}

export function compressor(codec: Codec, level: number): Transform {
  return codec === 'zstd'
    ? createZstdCompress({ chunkSize: CHUNK, params: { [constants.ZSTD_c_compressionLevel]: level } })
    : createGzip({ level, chunkSize: CHUNK });
}

/** The decompressor for codec; `chunkSize` for readers that want larger pieces still. */
export function decompressor(codec: Codec, chunkSize = CHUNK): Transform {
  return codec === 'zstd' ? createZstdDecompress({ chunkSize }) : createGunzip({ chunkSize });
}
