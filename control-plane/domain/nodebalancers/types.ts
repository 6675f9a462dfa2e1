import type { NodeBalancerType } from './model.js';

/**
 * The NodeBalancer types (/nodebalancers/types) and the limits each carries, as the real service
 * states them (docs/compatibility.md "NodeBalancer types"). Static limits (nodes per config) are
 * refused by the API; dynamic ones (concurrent connections, UDP sessions) travel in the snapshot
 * and the data plane enforces them (docs/dataplane.md "UDP").
 */
export interface NodeBalancerTypeEntry {
  id: NodeBalancerType;
  label: string;
  /** USD, as [hourly, monthly]; null where Fulcrum knows no list price. */
  price: [number | null, number | null];
  nodesPerConfig: number;
  /** Concurrent TCP/HTTP connections to the whole NodeBalancer. */
  connections: number;
  /** Concurrent UDP sessions to the whole NodeBalancer. */
  udpSessions: number;
}

export const nodeBalancerTypes: readonly NodeBalancerTypeEntry[] = [
  // The service states no UDP session figure for common; it gets its connection cap.
  { id: 'common', label: 'NodeBalancer', price: [0.015, 10], nodesPerConfig: 1000, connections: 10_000, udpSessions: 10_000 },
  { id: 'premium', label: 'Premium NodeBalancer', price: [null, null], nodesPerConfig: 2000, connections: 100_000, udpSessions: 80_000 },
];

export const nodeBalancerTypeIds = nodeBalancerTypes.map((t) => t.id);

export function typeLimits(id: NodeBalancerType): NodeBalancerTypeEntry {
  return nodeBalancerTypes.find((t) => t.id === id) ?? nodeBalancerTypes[0]!;
}

