import type { Socket } from 'node:net';

/** Ticks in a row without a byte before a connection counts as idle. */
const IDLE_TICKS = 4;

/**
 * A coarse idle timer for one connection, as tcp-session.ts has: it ticks every `idleMs / 4`,
 * compares the socket's `bytesRead + bytesWritten` with the last tick's, and calls `onIdle`
 * after four ticks in a row without a byte either way (so after `idleMs` to 1.25 x `idleMs`
 * of silence), then counts again. A socket timeout (`socket.setTimeout`) is exact, but Node
 * re-arms it on every read and every write: per keep-alive HTTP request that is four timer-list
 * insertions, client and backend side (docs/performance.md "Socket idle timers").
 *
 * Byte counts rather than a counter bumped per chunk: the HTTP session writes to its sockets
 * from several places. Unref'd, as a socket timeout is: an idle connection never keeps the
 * process alive. Real time: the peers measure idleness on their own clocks too
 * (docs/architecture.md, Time).
 */
export class IdleTicker {
  private readonly timer: NodeJS.Timeout;
  private readonly tickMs: number;
  private mark = -1;
  private ticks = 0;
  private limit = IDLE_TICKS;

  constructor(private readonly socket: Socket, idleMs: number, private readonly onIdle: () => void) {
    this.tickMs = idleMs / IDLE_TICKS;
    this.timer = setInterval(this.tick, this.tickMs).unref();
  }

  /** From now on the connection may be idle for `ms` (an upgraded tunnel's hour). */
  idleFor(ms: number): void {
    this.limit = Math.max(IDLE_TICKS, Math.ceil(ms / this.tickMs));
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private readonly tick = (): void => {
    const s = this.socket;
    // A socket destroyed before its owner's 'close' listener was added never stops us otherwise.
    if (s.destroyed) return this.stop();
    const mark = s.bytesRead + s.bytesWritten;
    if (mark !== this.mark) {
      this.mark = mark;
      this.ticks = 0;
    } else if (++this.ticks >= this.limit) {
      this.ticks = 0;
      this.onIdle();
    }
  };
}
