import { Counter, Gauge, type Registry } from 'prom-client';
import type { ConfigRuntime } from '../runtime/config-runtime.js';

const CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx'];

/**
 * Data-plane metrics. The hot path only bumps plain numbers on the config runtime; the values
 * are copied into prom-client at scrape time (collect), so per-request cost is nil and a
 * NodeBalancer that leaves the snapshot simply stops being reported (its labels disappear).
 */
export function registerDataplaneMetrics(registry: Registry, state: { runtimes(): Iterable<ConfigRuntime>; version(): number }): void {
  const labels = ['nodebalancer_id', 'config_id'];
  const conns = new Counter({ name: 'fulcrum_dataplane_connections_total', help: 'Client connections accepted', labelNames: labels, registers: [registry] });
  const active = new Gauge({ name: 'fulcrum_dataplane_active_connections', help: 'Client connections open now', labelNames: labels, registers: [registry] });
  const bytes = new Counter({ name: 'fulcrum_dataplane_bytes_total', help: 'Bytes proxied; in = client to backend, out = backend to client', labelNames: [...labels, 'direction'], registers: [registry] });
  const requests = new Counter({ name: 'fulcrum_dataplane_http_requests_total', help: 'HTTP responses sent to clients by status class', labelNames: [...labels, 'class'], registers: [registry] });
  const nodeUp = new Gauge({ name: 'fulcrum_dataplane_node_up', help: 'Node health: 1 UP, 0 DOWN, -1 unknown', labelNames: [...labels, 'node_id'], registers: [registry] });
  const version = new Gauge({ name: 'fulcrum_dataplane_config_version', help: 'Version of the snapshot being served', registers: [registry] });

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
    for (const rt of state.runtimes()) {
      const l = { nodebalancer_id: String(rt.spec.nodebalancerId), config_id: String(rt.spec.id) };
      conns.inc(l, rt.totalConns);
      active.set(l, rt.activeConns);
      bytes.inc({ ...l, direction: 'in' }, rt.totalIn);
      bytes.inc({ ...l, direction: 'out' }, rt.totalOut);
      if (rt.spec.protocol !== 'tcp') {
        for (let i = 1; i <= 5; i++) requests.inc({ ...l, class: CLASSES[i - 1] }, rt.requests[i]);
      }
      for (const n of rt.nodes.values()) {
        nodeUp.set({ ...l, node_id: String(n.id) }, n.status === 'UP' ? 1 : n.status === 'DOWN' ? 0 : -1);
      }
    }
    version.set(state.version());
  };
  for (const m of [conns, active, bytes, requests, nodeUp, version] as Array<{ collect?: () => void }>) m.collect = refresh;
}
