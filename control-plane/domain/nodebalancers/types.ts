import type { NodeBalancerType } from './model.js';

/**
 * The NodeBalancer types (/nodebalancers/types) and the limits each carries, as the real service
 * states them (docs/compatibility.md "NodeBalancer types"). Static limits (nodes per config) are
 * refused by the API; dynamic ones (concurrent connections, UDP sessions) travel in the snapshot
 * and the data plane enforces them (docs/dataplane.md "UDP").
 */
export interface NodeBalancerTypeEntry {
  /** The NodeBalancer's `type` field. */
  id: NodeBalancerType;
  /** The id /nodebalancers/types lists it under, as today's recordings show it (not the `type` value). */
  typeId: string;
  label: string;
  /** USD, as [hourly, monthly]; null where Fulcrum knows no list price. */
  price: [number | null, number | null];
  /** Regions priced apart from `price`, as recorded (linodego's TestNodeBalancerType_List, 2025). */
  regionPrices: { id: string; hourly: number; monthly: number }[];
  nodesPerConfig: number;
  /** Concurrent TCP/HTTP connections to the whole NodeBalancer. */
  connections: number;
  /** Concurrent UDP sessions to the whole NodeBalancer. */
  udpSessions: number;
}

export const nodeBalancerTypes: readonly NodeBalancerTypeEntry[] = [
  // The service states no UDP session figure for common; it gets its connection cap.
  {
    id: 'common', typeId: 'nodebalancer', label: 'NodeBalancer', price: [0.015, 10],
    regionPrices: [{ id: 'id-cgk', hourly: 0.018, monthly: 12 }, { id: 'br-gru', hourly: 0.021, monthly: 14 }],
    nodesPerConfig: 1000, connections: 10_000, udpSessions: 10_000,
  },
  {
    id: 'premium', typeId: 'nodebalancer-pr100', label: 'Nodebalancer Premium', price: [0.225, 150],
    regionPrices: [{ id: 'br-gru', hourly: 0.315, monthly: 210 }, { id: 'id-cgk', hourly: 0.27, monthly: 180 }],
    nodesPerConfig: 2000, connections: 100_000, udpSessions: 80_000,
  },
];

export const nodeBalancerTypeIds = nodeBalancerTypes.map((t) => t.id);

export function typeLimits(id: NodeBalancerType): NodeBalancerTypeEntry {
  return nodeBalancerTypes.find((t) => t.id === id) ?? nodeBalancerTypes[0]!;
}

