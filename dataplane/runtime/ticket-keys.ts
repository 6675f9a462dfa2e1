import { hkdfSync, randomBytes } from 'node:crypto';

/** How often the data plane draws a new ticket secret (docs/dataplane.md, "TLS resumption"). */
export const TICKET_ROTATE_MS = 60 * 60_000;
const MASTER_BYTES = 32;

/**
 * The secret behind every https config's TLS session tickets. One per data plane: the primary
 * draws it, rotates it and hands it to its workers over IPC (never to disk), so a ticket issued
 * by one worker resumes on any other. Each config's keys are derived from it with its id, so a
 * ticket from one NodeBalancer's listener never resumes on another's.
 */
export class TicketKeys {
  private master: Buffer;
  private readonly subs = new Set<() => void>();

  constructor(master?: Uint8Array) {
    this.master = master === undefined ? randomBytes(MASTER_BYTES) : TicketKeys.check(master);
  }

  /** The 48 bytes Node's tls.Server takes (key name, HMAC key, AES key) for one config. */
  forConfig(configId: number): Buffer {
    return Buffer.from(hkdfSync('sha256', this.master, 'fulcrum tls ticket keys', `config ${configId}`, 48));
  }

  /** The secret itself, for the workers. */
  secret(): Buffer {
    return Buffer.from(this.master);
  }

  /** Takes another secret (a worker, from its primary); servers re-key at once. */
  set(master: Uint8Array): void {
    this.master = TicketKeys.check(master);
    for (const cb of this.subs) cb();
  }

  /** Draws a new secret. Tickets issued under the old one no longer resume (a full handshake). */
  rotate(): void {
    this.set(randomBytes(MASTER_BYTES));
  }

  onChange(cb: () => void): () => void {
    this.subs.add(cb);
    return () => this.subs.delete(cb);
  }

  private static check(master: Uint8Array): Buffer {
    if (master.length !== MASTER_BYTES) throw new Error(`a ticket secret has ${MASTER_BYTES} bytes, got ${master.length}`);
    return Buffer.from(master);
  }
}
