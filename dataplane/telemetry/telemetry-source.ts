/**
 * What the telemetry stream reports and where it reads it from. The engine implements
 * `TelemetrySource`; the telemetry client depends on this file only, not on the engine.
 */

export interface HealthEvent {
  nodebalancerId: number;
  configId: number;
  nodeId: number;
  status: 'UP' | 'DOWN';
  atMs: number;
}

export interface CounterDelta {
  nodebalancerId: number;
  configId: number;
  bytesIn: number;
  bytesOut: number;
  connections: number;
  atMs: number;
}

export interface TelemetrySource {
  /** Subscribes to node UP/DOWN transitions as they happen; returns the unsubscribe. */
  onHealth(cb: (ev: HealthEvent) => void): () => void;
  /** Current status of every node that has one, for a full report after (re)connecting. */
  healthSnapshot(): HealthEvent[];
  /** Per-config deltas since the previous call (and resets them). */
  drainCounters(): CounterDelta[];
}
