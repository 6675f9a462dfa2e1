/**
 * A promise-chain mutex: `run` calls wait their turn in the order they were made, each starting
 * as soon as the one before it settles (no polling, no wake-up delay). Not re-entrant: `fn` must
 * not call `run` on the same mutex, or it waits on itself forever.
 */
export class Mutex {
  private tail: Promise<void> = Promise.resolve();
  private held = 0;

  /** Whether a call holds the mutex or waits for it. */
  get locked(): boolean {
    return this.held > 0;
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    const before = this.tail;
    let release!: () => void;
    this.tail = new Promise<void>((r) => (release = r));
    this.held++;
    try {
      await before;
      return await fn();
    } finally {
      this.held--;
      release();
    }
  }
}
