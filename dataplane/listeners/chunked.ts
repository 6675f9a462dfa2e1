/**
 * Tracks chunked transfer coding (RFC 9112 §7.1) incrementally so the proxy knows where a
 * message body ends while forwarding the bytes untouched. Strict: CRLF line ends, hex sizes of
 * below 2^52 (exact in a double; leading zeros bounded), bounded extension and trailer lengths.
 */
const SIZE = 0;
const EXT = 1;
const SIZE_LF = 2;
const DATA = 3;
const DATA_CR = 4;
const DATA_LF = 5;
const TRAILER_START = 6;
const TRAILER_LINE = 7;
const TRAILER_LF = 8;
const END_LF = 9;

export const CHUNK_ERROR = -2;
const MAX_LINE = 4096;
const MAX_SIZE_BEFORE_DIGIT = 2 ** 48;

export class ChunkedTracker {
  private state = SIZE;
  private size = 0;
  private digits = 0;
  private remaining = 0;
  private line = 0;
  private trailerBytes = 0;

  reset(): void {
    this.state = SIZE;
    this.size = this.digits = this.remaining = this.line = this.trailerBytes = 0;
  }

  /**
   * Consumes `b` from `start`. Returns the index just past the end of the message when it ends
   * inside `b`, -1 when all of `b` belongs to the message so far, CHUNK_ERROR on bad syntax.
   */
  feed(b: Buffer, start: number): number {
    let i = start;
    const n = b.length;
    while (i < n) {
      switch (this.state) {
        case DATA: {
          const take = Math.min(this.remaining, n - i);
          this.remaining -= take;
          i += take;
          if (this.remaining === 0) this.state = DATA_CR;
          continue;
        }
        case SIZE: {
          const c = b[i];
          let v = -1;
          if (c >= 0x30 && c <= 0x39) v = c - 0x30;
          else if (c >= 0x61 && c <= 0x66) v = c - 0x57;
          else if (c >= 0x41 && c <= 0x46) v = c - 0x37;
          if (v >= 0) {
            // Past 2^48 the next digit could leave the exactly representable integers, and a
            // size we cannot hold exactly is one the backend would read differently.
            if (this.size >= MAX_SIZE_BEFORE_DIGIT || ++this.digits > 64) return CHUNK_ERROR;
            this.size = this.size * 16 + v;
          } else if (this.digits === 0) {
            return CHUNK_ERROR;
          } else if (c === 0x3b || c === 0x20 || c === 0x09) {
            this.state = EXT;
            this.line = 0;
          } else if (c === 0x0d) {
            this.state = SIZE_LF;
          } else {
            return CHUNK_ERROR;
          }
          break;
        }
        case EXT: {
          const c = b[i];
          if (c === 0x0d) this.state = SIZE_LF;
          // Control bytes (bare LF, NUL...) in an extension are parsed differently by different servers.
          else if ((c < 0x20 && c !== 0x09) || c === 0x7f || ++this.line > MAX_LINE) return CHUNK_ERROR;
          break;
        }
        case SIZE_LF:
          if (b[i] !== 0x0a) return CHUNK_ERROR;
          if (this.size === 0) {
            this.state = TRAILER_START;
          } else {
            this.state = DATA;
            this.remaining = this.size;
          }
          this.size = 0;
          this.digits = 0;
          break;
        case DATA_CR:
          if (b[i] !== 0x0d) return CHUNK_ERROR;
          this.state = DATA_LF;
          break;
        case DATA_LF:
          if (b[i] !== 0x0a) return CHUNK_ERROR;
          this.state = SIZE;
          break;
        case TRAILER_START:
          if (b[i] === 0x0d) this.state = END_LF;
          else if (b[i] === 0x0a) return CHUNK_ERROR;
          else this.state = TRAILER_LINE;
          break;
        case TRAILER_LINE:
          if (++this.trailerBytes > MAX_LINE * 4) return CHUNK_ERROR;
          if (b[i] === 0x0d) this.state = TRAILER_LF;
          else if (b[i] === 0x0a) return CHUNK_ERROR;
          break;
        case TRAILER_LF:
          if (b[i] !== 0x0a) return CHUNK_ERROR;
          this.state = TRAILER_START;
          break;
        case END_LF:
          if (b[i] !== 0x0a) return CHUNK_ERROR;
          this.reset();
          return i + 1;
      }
      i++;
    }
    return -1;
  }
}
