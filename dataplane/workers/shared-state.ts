import type { Clock } from '../../lib/clock.js';
import { StickyTable } from '../sticky/sticky-table.js';
import { ConnThrottle } from '../throttle/conn-throttle.js';
import type { AdmitAnswer, AdmitRequest } from './protocol.js';

/**
 * What the workers of one data plane must agree on, kept in the primary (docs/dataplane.md,
 * "Workers"): client_conn_throttle per NodeBalancer over every worker (per client key), and the `table`
 * stickiness entries (client IP -> node id, with the time each was made so that every worker's
 * copy expires together). `serves` says whether a node may still take a pinned client (the
 * primary's health verdict).
 */
export class SharedState {
  private readonly throttles = new Map<number, ConnThrottle>();
  private readonly tables = new Map<number, StickyTable<number>>();

  constructor(private readonly clock: Clock, private readonly serves: (configId: number, nodeId: number) => boolean) {}

  admit(m: AdmitRequest): AdmitAnswer {
    if (m.limit > 0) {
      let t = this.throttles.get(m.nb);
      if (t === undefined) this.throttles.set(m.nb, (t = new ConnThrottle(m.limit, this.clock)));
      t.limit = m.limit;
      if (!t.allow(m.key)) return { t: 'admitted', id: m.id, ok: false };
    }
    if (m.config === undefined || m.node === undefined) return { t: 'admitted', id: m.id, ok: true };
    let table = this.tables.get(m.config);
    if (table === undefined) this.tables.set(m.config, (table = new StickyTable<number>(this.clock)));
    const e = table.entry(m.ip);
    if (e !== undefined && this.serves(m.config, e.node)) return { t: 'admitted', id: m.id, ok: true, node: e.node, added: e.added };
    const added = this.clock.now();
    table.set(m.ip, m.node, added);
    return { t: 'admitted', id: m.id, ok: true, node: m.node, added };
  }

  /** A node went DOWN: its clients are balanced again, as in one process. */
  nodeDown(configId: number, nodeId: number): void {
    this.tables.get(configId)?.dropNode(nodeId);
  }

  /** After a snapshot: forget NodeBalancers and configs that left it. */
  retain(nodebalancers: Pick<ReadonlySet<number>, 'has'>, configs: Pick<ReadonlySet<number>, 'has'>): void {
    for (const id of this.throttles.keys()) if (!nodebalancers.has(id)) this.throttles.delete(id);
    for (const id of this.tables.keys()) if (!configs.has(id)) this.tables.delete(id);
  }
}
