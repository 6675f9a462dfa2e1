import { Counter, Gauge, type Registry } from 'prom-client';
import type { CheckType, Protocol } from '../config/model.js';
import type { NodeStatus } from '../runtime/node-state.js';
import type { TrafficCounters } from '../runtime/traffic-counters.js';
import { bodyMatcher } from '../health/body-match.js';
import { udpRelay } from '../native/udp-relay.js';
import { udpSendErrors } from '../listeners/udp-fast.js';

/** What a scrape reads of one config being served. */
export interface ConfigMetricsView {
  readonly spec: { readonly id: number; readonly nodebalancerId: number; readonly protocol: Protocol; readonly check: CheckType };
  readonly traffic: TrafficCounters;
  readonly nodes: ReadonlyMap<number, { readonly id: number; readonly status: NodeStatus }>;
}

/** Where the data-plane metrics come from (the engine). */
export interface MetricsSource {
  configs(): Iterable<ConfigMetricsView>;
  version(): number;
  /** Client connections refused at accept, by reason (throttle/conn-limits.ts). */
  refusals(): Readonly<Record<string, number>>;
  /** Client connections open now over every NodeBalancer. */
  openConnections(): number;
}

/** `[dropped, truncated]` datagrams of the native udp relays of this process (native/udp_relay.c). */
export type UdpRelayDrops = () => readonly [number, number];

const nativeDrops: UdpRelayDrops = () => udpRelay?.drops() ?? [0, 0];

/**
 * Registers the data-plane metrics on the process registry; called by the composition root
 * (main.ts). The hot path only bumps plain numbers on each config's TrafficCounters; the values
 * are copied into prom-client at scrape time (collect), so per-request cost is nil and a
 * NodeBalancer that leaves the snapshot simply stops being reported (its labels disappear).
 */
export function registerDataplaneMetrics(registry: Registry, source: MetricsSource, udpDrops: UdpRelayDrops = nativeDrops): void {
  const labels = ['nodebalancer_id', 'config_id'];
  const conns = new Counter({ name: 'fulcrum_dataplane_connections_total', help: 'Client connections accepted', labelNames: labels, registers: [registry] });
  const active = new Gauge({ name: 'fulcrum_dataplane_active_connections', help: 'Client connections open now', labelNames: labels, registers: [registry] });
  const bytes = new Counter({ name: 'fulcrum_dataplane_bytes_total', help: 'Bytes proxied; in = client to backend, out = backend to client', labelNames: [...labels, 'direction'], registers: [registry] });
  const requests = new Counter({ name: 'fulcrum_dataplane_http_requests_total', help: 'HTTP responses sent to clients by status class', labelNames: [...labels, 'class'], registers: [registry] });
  const nodeUp = new Gauge({ name: 'fulcrum_dataplane_node_up', help: 'Node health: 1 UP, 0 DOWN, -1 unknown', labelNames: [...labels, 'node_id'], registers: [registry] });
  const version = new Gauge({ name: 'fulcrum_dataplane_config_version', help: 'Version of the snapshot being served', registers: [registry] });
  const refused = new Counter({ name: 'fulcrum_dataplane_connections_refused_total', help: 'Client connections refused at accept, by reason', labelNames: ['reason'], registers: [registry] });
  const matchTimeouts = new Counter({ name: 'fulcrum_dataplane_check_body_timeouts_total', help: 'check_body matches abandoned at the time limit (the check failed)', registers: [registry] });
  const matchDropped = new Counter({ name: 'fulcrum_dataplane_check_body_dropped_total', help: 'check_body matches dropped unrun: probe_ended (its probe timed out or stopped), queue_full', labelNames: ['reason'], registers: [registry] });
  const quarantines = new Counter({ name: 'fulcrum_dataplane_check_body_quarantines_total', help: 'check_body patterns quarantined: time_limit (one match ran over), cpu_budget (matches used too much time)', labelNames: ['reason'], registers: [registry] });
  const quarantined = new Gauge({ name: 'fulcrum_dataplane_check_body_quarantined', help: 'http_body configs: 1 while the check_body pattern is quarantined (checks fail)', labelNames: labels, registers: [registry] });
  const open = new Gauge({ name: 'fulcrum_dataplane_open_connections', help: 'Client connections open now over every NodeBalancer', registers: [registry] });
  // The native udp relay drops where node:dgram would have queued (docs/dataplane.md "UDP: the
  // native datagram path"): counted in C per process, across every relay this process has had.
  const udpSendFailed = new Counter({ name: 'fulcrum_dataplane_udp_send_errors_total', help: 'Datagrams the JavaScript udp path could not send (the kernel refused the send; the datagram is dropped), by error code', labelNames: ['code'], registers: [registry] });
  const udpDropped = new Counter({ name: 'fulcrum_dataplane_udp_relay_dropped_total', help: 'Datagrams the native udp relay dropped: send_failed (the kernel refused a send: EAGAIN, a full send buffer, or another error), truncated (a read larger than its buffer)', labelNames: ['reason'], registers: [registry] });

  // prom-client calls every metric's collect synchronously at the start of a scrape; the first
  // call refreshes all series and the flag is cleared once that synchronous pass is over.
  let fresh = false;
  const refresh = (): void => {
    if (fresh) return;
    fresh = true;
    queueMicrotask(() => (fresh = false));
    conns.reset();
    active.reset();
    bytes.reset();
    requests.reset();
    nodeUp.reset();
    quarantined.reset();
    const held = bodyMatcher.quarantinedConfigs();
    for (const rt of source.configs()) {
      const l = { nodebalancer_id: String(rt.spec.nodebalancerId), config_id: String(rt.spec.id) };
      const t = rt.traffic;
      conns.inc(l, t.totalConns);
      active.set(l, t.open);
      bytes.inc({ ...l, direction: 'in' }, t.totalIn);
      bytes.inc({ ...l, direction: 'out' }, t.totalOut);
      if (rt.spec.protocol === 'http' || rt.spec.protocol === 'https') {
        requests.inc({ ...l, class: '1xx' }, t.status1xx);
        requests.inc({ ...l, class: '2xx' }, t.status2xx);
        requests.inc({ ...l, class: '3xx' }, t.status3xx);
        requests.inc({ ...l, class: '4xx' }, t.status4xx);
        requests.inc({ ...l, class: '5xx' }, t.status5xx);
      }
      if (rt.spec.check === 'http_body') quarantined.set(l, held.has(`${rt.spec.nodebalancerId}/${rt.spec.id}`) ? 1 : 0);
      for (const n of rt.nodes.values()) {
        nodeUp.set({ ...l, node_id: String(n.id) }, n.status === 'UP' ? 1 : n.status === 'DOWN' ? 0 : -1);
      }
    }
    version.set(source.version());
    refused.reset();
    for (const [reason, n] of Object.entries(source.refusals())) refused.inc({ reason }, n);
    open.set(source.openConnections());
    matchTimeouts.reset();
    matchTimeouts.inc(bodyMatcher.timeouts);
    matchDropped.reset();
    for (const [reason, n] of Object.entries(bodyMatcher.dropped)) matchDropped.inc({ reason }, n);
    quarantines.reset();
    for (const [reason, n] of Object.entries(bodyMatcher.quarantines)) quarantines.inc({ reason }, n);
    udpDropped.reset();
    const [sendFailed, truncated] = udpDrops();
    udpDropped.inc({ reason: 'send_failed' }, sendFailed);
    udpDropped.inc({ reason: 'truncated' }, truncated);
    udpSendFailed.reset();
    for (const [code, n] of udpSendErrors()) udpSendFailed.inc({ code }, n);
  };
  for (const m of [conns, active, bytes, requests, nodeUp, version, refused, open, matchTimeouts, matchDropped, quarantines, quarantined, udpDropped, udpSendFailed] as Array<{ collect?: () => void }>) m.collect = refresh;
}
