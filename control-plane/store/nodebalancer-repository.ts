import type { NbConfig, NbNode, NewConfig, NewNode, NodeBalancer, NodeStatus } from '../domain/nodebalancers/model.js';

/**
 * Storage of NodeBalancers with their Configs and Nodes. `transaction` runs a function
 * atomically: everything it writes commits together or not at all (used by create-with-configs
 * and rebuild, which must change nothing when any part fails).
 */
export interface NodeBalancerRepository {
  transaction<T>(fn: () => T): T;
  list(): NodeBalancer[];
  get(id: number): NodeBalancer | undefined;
  byLabel(label: string): NodeBalancer | undefined;
  /** Inserts the row with the next id from the NodeBalancer id sequence and returns it. */
  create(nb: Omit<NodeBalancer, 'id'>): NodeBalancer;
  update(id: number, patch: Partial<Pick<NodeBalancer, 'label' | 'clientConnThrottle' | 'clientUdpSessThrottle' | 'tags' | 'updated'>>): void;
  delete(id: number): void;
  setIpv4(id: number, ipv4: string): void;
  setIpv6(id: number, ipv6: string | null): void;

  configs(nodebalancerId: number): NbConfig[];
  config(nodebalancerId: number, configId: number): NbConfig | undefined;
  createConfig(nodebalancerId: number, c: NewConfig): NbConfig;
  updateConfig(configId: number, c: NewConfig): void;
  deleteConfig(configId: number): void;

  nodes(configId: number): NbNode[];
  nodesOfNodeBalancer(nodebalancerId: number): NbNode[];
  node(configId: number, nodeId: number): NbNode | undefined;
  createNode(nodebalancerId: number, configId: number, n: NewNode): NbNode;
  updateNode(nodeId: number, n: NewNode): void;
  deleteNode(nodeId: number): void;
  setNodeStatus(nodeId: number, status: NodeStatus): boolean;

  /** Adds counter deltas into the 5-minute bucket that holds `atMs`. */
  addTraffic(nodebalancerId: number, configId: number, atMs: number, d: { bytesIn: number; bytesOut: number; connections: number }): void;
  /** Rows with bucket >= sinceMs, ascending. */
  traffic(nodebalancerId: number, sinceMs: number): { bucket: number; bytesIn: number; bytesOut: number; connections: number }[];
}
