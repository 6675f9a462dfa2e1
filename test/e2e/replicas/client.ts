/**
 * A REST client over several API base URLs, as a client behind a list of replicas behaves: it
 * sends to its preferred one, and when that one refuses connections (it is gone) to the next.
 *
 * A write's outcome is one of three: `ok` (200), `refused` (any other status: the replica
 * answered, so it decided), or `unknown` (the connection broke after the request may have
 * been sent: the replica may or may not have committed it before it died).
 */
export type Outcome =
  | { kind: 'ok'; body: any; via: string }
  | { kind: 'refused'; status: number; body: any; via: string }
  | { kind: 'unknown'; error: string; via: string };

export interface Base {
  url: string;
  token: string;
  /** False once a connection to it was refused: later calls go to the next one. */
  up: boolean;
}

function refusedConnection(err: unknown): boolean {
  const cause = (err as { cause?: { code?: string } }).cause;
  return cause?.code === 'ECONNREFUSED';
}

export class ReplicaClient {
  constructor(private readonly bases: Base[], private readonly preferred: number) {}

  private order(): Base[] {
    const n = this.bases.length;
    return Array.from({ length: n }, (_, i) => this.bases[(this.preferred + i) % n]!).filter((b) => b.up);
  }

  /** One write: never repeated once it may have reached a replica. */
  async write(method: string, path: string, body?: unknown): Promise<Outcome> {
    for (const base of this.order()) {
      try {
        const res = await fetch(`${base.url}${path}`, {
          method,
          headers: { authorization: `Bearer ${base.token}`, 'content-type': 'application/json' },
          body: body === undefined ? undefined : JSON.stringify(body),
        });
        const text = await res.text();
        const parsed = text ? JSON.parse(text) : undefined;
        return res.status === 200 ? { kind: 'ok', body: parsed, via: base.url } : { kind: 'refused', status: res.status, body: parsed, via: base.url };
      } catch (err) {
        // Refused: nothing was sent, so the next replica may take the same write.
        if (refusedConnection(err)) {
          base.up = false;
          continue;
        }
        return { kind: 'unknown', error: String((err as Error).cause ?? err), via: base.url };
      }
    }
    throw new Error('no replica accepts connections');
  }

  /** A read: repeated on the next replica until one answers. */
  async read(path: string): Promise<{ status: number; body: any }> {
    let last: unknown;
    for (let attempt = 0; attempt < 3; attempt++) {
      for (const base of this.order()) {
        try {
          const res = await fetch(`${base.url}${path}`, { headers: { authorization: `Bearer ${base.token}` } });
          const text = await res.text();
          return { status: res.status, body: text ? JSON.parse(text) : undefined };
        } catch (err) {
          last = err;
          if (refusedConnection(err)) base.up = false;
        }
      }
    }
    throw new Error(`read ${path} failed on every replica: ${String(last)}`);
  }

  /** Every page of a list. */
  async all(path: string): Promise<any[]> {
    const out: any[] = [];
    for (let page = 1; ; page++) {
      const r = await this.read(`${path}${path.includes('?') ? '&' : '?'}page=${page}&page_size=500`);
      if (r.status !== 200) throw new Error(`GET ${path}: ${r.status} ${JSON.stringify(r.body)}`);
      out.push(...(r.body.data as any[]));
      if (page >= (r.body.pages as number)) return out;
    }
  }
}
