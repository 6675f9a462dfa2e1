import { afterEach } from 'vitest';
import { createProxyEngine, type ProxyEngine } from '../../../dataplane/engine.js';
import { registerDataplaneMetrics } from '../../../dataplane/telemetry/metrics.js';
import { silentLogger } from '../../../lib/logger.js';
import { createRegistry } from '../../../lib/metrics.js';
import type { Registry } from 'prom-client';

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
