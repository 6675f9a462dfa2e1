import type { Clock } from '../../lib/clock.js';
import type { Logger } from '../../lib/logger.js';
import type { ConfigSpec, NodeBalancerSpec } from '../config/model.js';
import type { CounterDelta, HealthEvent } from '../telemetry/telemetry-source.js';
import { ConnThrottle } from '../throttle/conn-throttle.js';
import type { ConnLimits } from '../throttle/conn-limits.js';
import { ConfigRuntime, type RemoteHealth } from './config-runtime.js';
import type { TicketKeys } from './ticket-keys.js';

export interface RuntimeSetOptions {
  clock: Clock;
  log: Logger;
  limits: ConnLimits;
  /** Every node UP/DOWN transition of every config. */
  emit: (ev: HealthEvent) => void;
  remoteHealth?: RemoteHealth;
  tickets: TicketKeys;
}

/**
 * The live state of every config served (`ConfigRuntime`: nodes, health, pools, counters) and
 * each NodeBalancer's throttles, plus the runtimes of removed configs whose connections still run
 * (their bytes are still reported). A config keeps its runtime across snapshots unless it moved
 * NodeBalancer or to or from udp.
 */
export class RuntimeSet {
  private readonly runtimes = new Map<number, ConfigRuntime>();
  private readonly throttles = new Map<number, ConnThrottle>();
  // Per NodeBalancer as well: client_udp_sess_throttle and the UDP session caps (docs/dataplane.md "UDP").
  private readonly udpGates = new Map<number, ConnThrottle>();
  private readonly retired = new Set<ConfigRuntime>();

  constructor(private readonly o: RuntimeSetOptions) {}

  get size(): number {
    return this.runtimes.size;
  }

  get(id: number): ConfigRuntime | undefined {
    return this.runtimes.get(id);
  }

  values(): IterableIterator<ConfigRuntime> {
    return this.runtimes.values();
  }

  /**
   * Builds the runtimes of `upserts`' configs that cannot keep theirs, before the swap and in
   * slices of `slice` (nothing serves them yet), so the swap stays short however many
   * NodeBalancers arrive at once.
   */
  async build(upserts: readonly NodeBalancerSpec[], slice: number, pause: () => Promise<void>): Promise<Map<number, ConfigRuntime>> {
    const built = new Map<number, ConfigRuntime>();
    for (const nb of upserts) {
      for (const c of nb.configs) {
        if (reusable(this.runtimes.get(c.id), c)) continue;
        if (!this.throttles.has(nb.id)) this.gates(nb);
        built.set(c.id, this.newRuntime(c, nb.id));
        if (built.size % slice === 0) await pause();
      }
    }
    return built;
  }

  /** Runtimes built for a commit that will not swap. */
  discard(built: ReadonlyMap<number, ConfigRuntime>): void {
    for (const rt of built.values()) rt.retire();
  }

  /**
   * The swap, for config `c` of NodeBalancer `nb`: its runtime is updated in place when it can
   * stay, else replaced by the one built for it. Returns the runtime that serves it now.
   */
  take(c: ConfigSpec, nb: number, built: ReadonlyMap<number, ConfigRuntime>): ConfigRuntime {
    let rt = this.runtimes.get(c.id);
    if (reusable(rt, c)) {
      rt.update(c);
      return rt;
    }
    if (rt) this.retire(rt);
    rt = built.get(c.id) ?? this.newRuntime(c, nb);
    this.runtimes.set(c.id, rt);
    return rt;
  }

  /** Retires the runtimes of `ids` that no config kept. */
  retireUnless(ids: readonly number[], kept: ReadonlySet<number>): void {
    for (const id of ids) {
      const rt = this.runtimes.get(id);
      if (rt && !kept.has(id)) this.retire(rt);
    }
  }

  /** A NodeBalancer's throttles; premium: 10x the connections, 8x the UDP sessions in all and per client (docs/dataplane.md "UDP"); a worker's UDP part (`udpPart`). */
  gates(nb: NodeBalancerSpec): void {
    const { limits } = this.o;
    const [tcp, udp] = nb.type === 'premium' ? [10, 8] : [1, 1];
    this.gate(this.throttles, nb.id, nb.clientConnThrottle, limits.perClientPerNodeBalancer, limits.perNodeBalancer * tcp);
    this.gate(this.udpGates, nb.id, limits.udpPart(nb.clientUdpSessThrottle), limits.udpPart(limits.udpSessionsPerClient * udp), limits.udpPart(limits.udpSessionsPerNodeBalancer * udp));
  }

  /** A NodeBalancer no longer served: its throttles go. */
  dropGates(nb: number): void {
    this.throttles.delete(nb);
    this.udpGates.delete(nb);
  }

  /** The TLS ticket secret changed: every https config takes the new one. */
  rekey(): void {
    for (const rt of this.runtimes.values()) rt.rekey();
  }

  /** Per-config deltas since the previous call (and resets them), the retired runtimes' too. */
  drainCounters(): CounterDelta[] {
    const out: CounterDelta[] = [];
    for (const rt of this.retired) {
      const d = this.takeDelta(rt);
      if (d) out.push(d);
      if (rt.traffic.open <= 0) this.retired.delete(rt);
    }
    for (const rt of this.runtimes.values()) {
      const d = this.takeDelta(rt);
      if (d) out.push(d);
    }
    return out;
  }

  /** A drain has begun: sessions finish and tell http clients to reconnect. */
  markDraining(): void {
    for (const rt of [...this.runtimes.values(), ...this.retired]) rt.draining = true;
  }

  retireAll(): void {
    for (const rt of this.runtimes.values()) rt.retire();
  }

  clear(): void {
    this.runtimes.clear();
  }

  private takeDelta(rt: ConfigRuntime): CounterDelta | null {
    const t = rt.traffic;
    if (!t.hasDelta) return null;
    const d = { nodebalancerId: rt.spec.nodebalancerId, configId: rt.spec.id, bytesIn: t.deltaIn, bytesOut: t.deltaOut, connections: t.deltaConns, atMs: this.o.clock.now() };
    t.resetDelta();
    return d;
  }

  private newRuntime(c: ConfigSpec, nb: number): ConfigRuntime {
    const { clock, log, emit, remoteHealth, tickets } = this.o;
    return new ConfigRuntime(c, (c.protocol === 'udp' ? this.udpGates : this.throttles).get(nb)!, clock, log.child({ configId: c.id }), emit, remoteHealth, tickets);
  }

  /** Creates or updates a NodeBalancer's throttle (per client rate, concurrent caps). */
  private gate(map: Map<number, ConnThrottle>, id: number, rate: number, perClient: number, total: number): void {
    let t = map.get(id);
    if (t) t.limit = rate;
    else map.set(id, (t = new ConnThrottle(rate, this.o.clock, perClient, total)));
    t.concurrent.total = total;
    t.concurrent.perKey = perClient;
  }

  private retire(rt: ConfigRuntime): void {
    rt.retire();
    this.runtimes.delete(rt.spec.id);
    this.retired.add(rt);
  }
}

/** A config keeps its runtime (node state, pools) unless it moved NodeBalancer or to or from udp. */
function reusable(rt: ConfigRuntime | undefined, c: ConfigSpec): rt is ConfigRuntime {
  return rt !== undefined && rt.spec.nodebalancerId === c.nodebalancerId && (rt.spec.protocol === 'udp') === (c.protocol === 'udp');
}
