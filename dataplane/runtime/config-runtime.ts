import { createServer as createTlsServer, type Server as TlsServer } from 'node:tls';
import type { Clock } from '../../lib/clock.js';
import type { Logger } from '../../lib/logger.js';
import type { ConfigSpec } from '../config/model.js';
import { tlsOptions } from '../config/cipher-suites.js';
import { emptyPicker, type Picker } from '../balancing/picker.js';
import { policies } from '../balancing/registry.js';
import { HealthChecker } from '../health/checker.js';
import { passiveMarksDown } from '../health/passive.js';
import { afterProbe } from '../health/rise-fall.js';
import { StickyTable } from '../sticky/sticky-table.js';
import type { ConnThrottle } from '../throttle/conn-throttle.js';
import type { HealthEvent } from '../telemetry/telemetry-source.js';
import { NodeState } from './node-state.js';
import type { SessionConfig } from './session-config.js';
import { TrafficCounters } from './traffic-counters.js';
import type { TicketKeys } from './ticket-keys.js';
import { bumpPolicyEpoch } from '../native/policy-epoch.js';

/**
 * A worker of a multi-process data plane (docs/dataplane.md, "Workers"): health is decided once,
 * in the primary, so the runtime runs no active checks, tells the primary of passive failures,
 * and takes node statuses from it (`setStatusFrom`).
 */
export interface RemoteHealth {
  passive(configId: number, nodeId: number, reason: string): void;
}

const NO_COOKIES: ReadonlyMap<string, NodeState> = new Map();

/**
 * Everything one config needs at run time: its nodes' live state, the current picker, stickiness,
 * counters and (https) its TLS context. Sessions hold a reference to the runtime they started on,
 * so a config change never disturbs connections already open.
 */
export class ConfigRuntime implements SessionConfig {
  spec: ConfigSpec;
  nodes = new Map<number, NodeState>();
  private picker: Picker<NodeState> = emptyPicker;
  private byCookie: ReadonlyMap<string, NodeState> = NO_COOKIES;
  private table: StickyTable<NodeState> | null = null;
  tls: TlsServer | null = null;
  removed = false;
  readonly traffic = new TrafficCounters();
  private checker: HealthChecker | null = null;
  /** The data plane is draining this process: http clients are told to reconnect (docs/dataplane.md). */
  draining = false;

  constructor(
    spec: ConfigSpec,
    readonly throttle: ConnThrottle,
    readonly clock: Clock,
    private readonly log: Logger,
    private readonly emit: (ev: HealthEvent) => void,
    private readonly remote: RemoteHealth | null = null,
    private readonly tickets: TicketKeys | null = null,
  ) {
    this.spec = spec;
    this.update(spec, true);
  }

  /** Applies a new spec for the same config id; node state survives where id and address match. */
  update(spec: ConfigSpec, first = false): void {
    // What udp sessions relayed natively were established under may have changed.
    bumpPolicyEpoch();
    const old = this.spec;
    if (!first && old.fingerprint === spec.fingerprint) {
      this.spec = spec;
      return;
    }
    this.spec = spec;
    const next = new Map<number, NodeState>();
    const fresh: NodeState[] = [];
    for (const n of spec.nodes) {
      let st = this.nodes.get(n.id);
      if (st && st.spec.address === n.address) {
        const wasReject = st.spec.mode === 'reject';
        st.spec = n;
        if (wasReject && n.mode !== 'reject') {
          st.status = 'unknown';
          st.fails = st.passes = 0;
          fresh.push(st);
        }
      } else {
        st = new NodeState(n, spec.id);
        fresh.push(st);
      }
      next.set(n.id, st);
    }
    for (const [id, st] of this.nodes) {
      if (next.get(id) !== st) {
        st.retired = true;
        st.closeIdle();
      }
    }
    this.nodes = next;
    // Only http_cookie stickiness looks nodes up by cookie (see pinned below).
    this.byCookie = spec.stickiness === 'http_cookie' ? new Map([...next.values()].map((s) => [s.cookie, s])) : NO_COOKIES;
    // source_ip (udp) is a table too, its entries living for the session timeout.
    if (spec.stickiness === 'table') this.table ??= new StickyTable(this.clock);
    else if (spec.stickiness === 'source_ip') this.table = old.udpSessionTimeoutMs === spec.udpSessionTimeoutMs && this.table ? this.table : new StickyTable(this.clock, spec.udpSessionTimeoutMs);
    else this.table = null;
    this.setupTls(old, first);
    // reject is DOWN whatever the checks say. Every other node stays `unknown` until a check or
    // real traffic has seen it (docs/dataplane.md, Health): with check none only traffic does.
    for (const st of next.values()) {
      if (st.spec.mode === 'reject') this.setStatus(st, 'DOWN');
    }
    this.rebuild();
    if (this.remote === null && (first || old.checkKey !== spec.checkKey)) {
      this.checker?.stop();
      this.checker = new HealthChecker(spec, () => [...this.nodes.values()], (n, f) => this.onCheck(n, f), this.clock, this.log);
      this.checker.start();
    }
  }

  private setupTls(old: ConfigSpec, first: boolean): void {
    const s = this.spec;
    if (s.protocol !== 'https') {
      this.tls = null;
      return;
    }
    // The data plane's ticket keys go into every context: setSecureContext would otherwise put
    // back the keys the server was created with.
    const ctx = { ...tlsOptions(s.sslCert, s.sslKey, s.cipherSuite), ...(this.tickets ? { ticketKeys: this.tickets.forConfig(s.id) } : {}) };
    if (!this.tls) {
      this.tls = createTlsServer({ ...ctx, handshakeTimeout: 10_000 });
    } else if (first || old.sslCert !== s.sslCert || old.sslKey !== s.sslKey || old.cipherSuite !== s.cipherSuite) {
      // New handshakes use the new certificate; the listening socket is never rebound.
      this.tls.setSecureContext(ctx);
    }
  }

  /** The ticket secret changed (rotation, or a worker told by its primary). */
  rekey(): void {
    if (this.tls && this.tickets) this.tls.setTicketKeys(this.tickets.forConfig(this.spec.id));
  }

  /** Rebuilds the immutable picker: healthy accept nodes, else healthy backups. */
  private rebuild(): void {
    const accept: NodeState[] = [];
    const backup: NodeState[] = [];
    for (const st of this.nodes.values()) {
      if (st.status === 'DOWN') continue;
      if (st.spec.mode === 'accept' || st.spec.mode === 'none') accept.push(st);
      else if (st.spec.mode === 'backup') backup.push(st);
    }
    const policy = policies[this.spec.algorithm];
    this.picker = accept.length > 0 ? policy.build(accept) : policy.build(backup);
  }

  /**
   * Stickiness in front of the picker: a pinned node first (table entry or NB_SRVID cookie)
   * while it can serve, else the picker, whose choice a table then remembers.
   */
  choose(ip: string, hash: number, pinned: NodeState | undefined, exclude: ReadonlySet<NodeState> | null): NodeState | undefined {
    const table = this.table;
    if (table !== null) {
      const entry = table.get(ip);
      if (entry !== undefined) {
        if (entry.servesPinned && (exclude === null || !exclude.has(entry))) return entry;
        table.delete(ip);
      }
    } else if (pinned !== undefined && pinned.servesPinned && (exclude === null || !exclude.has(pinned))) {
      return pinned;
    }
    const node = this.picker.pick(hash, exclude);
    if (node !== undefined && table !== null) table.set(ip, node);
    return node;
  }

  pinnedBy(cookie: string): NodeState | undefined {
    return this.spec.stickiness === 'http_cookie' && cookie !== '' ? this.byCookie.get(cookie) : undefined;
  }

  opened(node: NodeState): void {
    node.active++;
  }

  closed(node: NodeState): void {
    node.active--;
  }

  seen(node: NodeState): void {
    if (node.status !== 'unknown' || node.retired || this.removed) return;
    this.setStatus(node, 'UP');
  }

  failed(node: NodeState, reason: string): void {
    if (!passiveMarksDown(this.spec, node)) return;
    this.log.warn({ configId: this.spec.id, node: node.id, reason }, 'passive check marks node DOWN');
    this.setStatus(node, 'DOWN');
    this.rebuild();
    this.checker?.recover(node);
    this.remote?.passive(this.spec.id, node.id, reason);
  }

  /** A worker: the primary's verdict on a node (docs/dataplane.md, "Workers"). */
  setStatusFrom(nodeId: number, status: 'UP' | 'DOWN'): void {
    const node = this.nodes.get(nodeId);
    if (node === undefined || node.status === status) return;
    if (status === 'DOWN') node.fails = this.spec.checkAttempts;
    this.setStatus(node, status);
    this.rebuild();
  }

  /** Whether `table` stickiness already pins this client here (no need to ask the primary). */
  pinned(ip: string): boolean {
    return this.table === null || this.table.get(ip) !== undefined;
  }

  /** The node the picker would give a new client now (what a worker proposes to the shared table). */
  propose(hash: number): number | undefined {
    return this.picker.pick(hash, null)?.id;
  }

  /** Pins a client to a node as the data plane's shared table says, with the entry's own age. */
  pin(ip: string, nodeId: number, addedMs: number): void {
    const node = this.nodes.get(nodeId);
    if (node !== undefined && this.table !== null) this.table.set(ip, node, addedMs);
  }

  private onCheck(node: NodeState, failure: string | null): void {
    if (node.retired || this.removed) return;
    const next = afterProbe(node, failure, this.spec.checkAttempts);
    if (next === null) return;
    this.setStatus(node, next);
    this.rebuild();
  }

  private setStatus(node: NodeState, status: 'UP' | 'DOWN'): void {
    if (node.status === status) return;
    node.status = status;
    if (status === 'DOWN') {
      this.table?.dropNode(node);
      node.closeIdle();
    }
    this.emit({ nodebalancerId: this.spec.nodebalancerId, configId: this.spec.id, nodeId: node.id, status, atMs: this.clock.now() });
  }

  /** Current status of every node that has one (for a full telemetry report). */
  statuses(): HealthEvent[] {
    const out: HealthEvent[] = [];
    for (const st of this.nodes.values()) {
      if (st.status !== 'unknown') out.push({ nodebalancerId: this.spec.nodebalancerId, configId: this.spec.id, nodeId: st.id, status: st.status, atMs: this.clock.now() });
    }
    return out;
  }

  /** The config left the snapshot: stop checks, drop pools; open sessions finish on their own. */
  retire(): void {
    this.removed = true;
    bumpPolicyEpoch();
    this.checker?.stop();
    for (const st of this.nodes.values()) {
      st.retired = true;
      st.closeIdle();
    }
  }
}
