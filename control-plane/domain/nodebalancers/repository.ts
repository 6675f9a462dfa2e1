import type { DataplaneStatus, NbConfig, NbNode, NewConfig, NewNode, NodeBalancer, NodeStatus } from './model.js';

/**
 * Storage of NodeBalancers with their Configs and Nodes. `transaction` runs a function
 * atomically: everything it writes commits together or not at all (used by create-with-configs
 * and rebuild, which must change nothing when any part fails).
 */
export interface NodeBalancerRepository {
  transaction<T>(fn: () => Promise<T>): Promise<T>;
  list(): Promise<NodeBalancer[]>;
  get(id: number): Promise<NodeBalancer | undefined>;
  byLabel(label: string): Promise<NodeBalancer | undefined>;
  /** Inserts the row with the next id from the NodeBalancer id sequence and returns it. */
  create(nb: Omit<NodeBalancer, 'id'>): Promise<NodeBalancer>;
  update(id: number, patch: Partial<Pick<NodeBalancer, 'label' | 'clientConnThrottle' | 'clientUdpSessThrottle' | 'tags' | 'updated'>>): Promise<void>;
  delete(id: number): Promise<void>;
  setIpv4(id: number, ipv4: string): Promise<void>;
  setIpv6(id: number, ipv6: string | null): Promise<void>;

  configs(nodebalancerId: number): Promise<NbConfig[]>;
  config(nodebalancerId: number, configId: number): Promise<NbConfig | undefined>;
  createConfig(nodebalancerId: number, c: NewConfig): Promise<NbConfig>;
  updateConfig(configId: number, c: NewConfig): Promise<void>;
  deleteConfig(configId: number): Promise<void>;

  nodes(configId: number): Promise<NbNode[]>;
  nodesOfNodeBalancer(nodebalancerId: number): Promise<NbNode[]>;
  node(configId: number, nodeId: number): Promise<NbNode | undefined>;
  createNode(nodebalancerId: number, configId: number, n: NewNode): Promise<NbNode>;
  updateNode(nodeId: number, n: NewNode): Promise<void>;
  deleteNode(nodeId: number): Promise<void>;
  setNodeStatus(nodeId: number, status: NodeStatus): Promise<boolean>;

  /** Adds counter deltas into the 5-minute bucket that holds `atMs`. */
  addTraffic(nodebalancerId: number, configId: number, atMs: number, d: { bytesIn: number; bytesOut: number; connections: number }): Promise<void>;
  /** Rows with bucket >= sinceMs, ascending. */
  traffic(nodebalancerId: number, sinceMs: number): Promise<{ bucket: number; bytesIn: number; bytesOut: number; connections: number }[]>;
}

/** What is known of each data plane: its stream, the config version it applied, its last error. */
export interface DataplaneRepository {
  upsert(s: DataplaneStatus): Promise<void>;
  get(id: string): Promise<DataplaneStatus | undefined>;
  list(): Promise<DataplaneStatus[]>;
  /**
   * Marks disconnected the data planes (only `id`, when given) whose stream `replica` holds, with
   * `lastSeen` = `at` when given; a host another replica holds since is left as it is.
   */
  release(replica: string, id?: string, at?: number): Promise<void>;
}
