import { afterEach } from 'vitest';
import { createProxyEngine, type ProxyEngine } from '../../../dataplane/engine.js';
import { registerDataplaneMetrics } from '../../../dataplane/telemetry/metrics.js';
import { silentLogger } from '../../../lib/logger.js';
import { createRegistry } from '../../../lib/metrics.js';
import type { Registry } from 'prom-client';
import { loopback } from '../../helpers/backends.js';
import { config, freePort, nodebalancer, snapshot } from './snapshot.js';

/** Registers cleanups run after each test (LIFO). */
export const cleanup: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanup.length) {
    try {
      await cleanup.pop()!();
    } catch {
      // best effort: one failing cleanup must not leak the rest
    }
  }
});

export function newEngine(opts: { drainTimeoutMs?: number } = {}): { engine: ProxyEngine; registry: Registry } {
  const registry = createRegistry('dataplane-test');
  const engine = createProxyEngine({ logger: silentLogger(), ...opts });
  registerDataplaneMetrics(registry, engine);
  cleanup.push(() => engine.close());
  return { engine, registry };
}

/**
 * A new engine serving snapshot 1: one NodeBalancer on a fresh loopback address with one config
 * of `nodes` on a free port (`cfg` and `nb` add to the defaults of snapshot.ts).
 */
export async function serveOneConfig(nodes: Parameters<typeof config>[1], cfg: Parameters<typeof config>[2] = {}, nb: Parameters<typeof nodebalancer>[2] = {}) {
  const ip = loopback();
  const port = await freePort(ip);
  const { engine, registry } = newEngine();
  const served = nodebalancer(ip, [config(port, nodes, cfg)], nb);
  await engine.apply(snapshot(1, [served]));
  return { ip, port, engine, registry, nb: served };
}
