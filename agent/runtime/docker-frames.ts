/**
 * Docker's framing of a container's stdout and stderr on one connection when there is no TTY
 * (logs and exec alike): each frame is an 8-byte header (stream type: 1 stdout, 2 stderr; three
 * zero bytes; the payload size, 32-bit big-endian) and then the payload. The one reader of it, for
 * docker-container.ts (a whole log buffer) and docker-exec.ts (a connection read chunk by chunk).
 */

export const FRAME_HEADER_BYTES = 8;

export interface Frame {
  /** 1 stdout, 2 stderr (0 would be stdin). */
  stream: number;
  /** Where the payload starts and ends in the buffer; `end` may lie past its end while the frame is still arriving. */
  start: number;
  end: number;
  /** The header has the shape of one (stdout or stderr, zero padding): text that is not framed does not. */
  wellFormed: boolean;
}

/** The frame whose header starts at `offset`, or undefined when the buffer does not hold a whole header there. */
export function frameAt(buf: Buffer, offset = 0): Frame | undefined {
  if (offset + FRAME_HEADER_BYTES > buf.length) return undefined;
  const stream = buf[offset]!;
  const start = offset + FRAME_HEADER_BYTES;
  return { stream, start, end: start + buf.readUInt32BE(offset + 4), wellFormed: (stream === 1 || stream === 2) && buf[offset + 1] === 0 };
}
