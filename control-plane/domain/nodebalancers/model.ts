/** Stored shapes of NodeBalancers, Configs and Nodes (domain side, not the wire format). */

/** The NodeBalancer types Fulcrum offers (types.ts holds their limits). */
export type NodeBalancerType = 'common' | 'premium';

export interface NodeBalancer {
  id: number;
  label: string;
  region: string;
  ipv4: string;
  /** From the IPv6 pool (docs/multi-host.md, "Address pools"); null when none is configured. */
  ipv6: string | null;
  clientConnThrottle: number;
  /** New UDP sessions per second per client IP; 0 = off (docs/dataplane.md "UDP"). */
  clientUdpSessThrottle: number;
  type: NodeBalancerType;
  tags: string[];
  created: number;
  updated: number;
}

export interface NbConfig {
  id: number;
  nodebalancerId: number;
  port: number;
  protocol: 'tcp' | 'http' | 'https' | 'udp';
  algorithm: 'roundrobin' | 'leastconn' | 'source' | 'ring_hash';
  stickiness: 'none' | 'table' | 'http_cookie' | 'session' | 'source_ip';
  check: 'none' | 'connection' | 'http' | 'http_body';
  checkInterval: number;
  checkTimeout: number;
  checkAttempts: number;
  checkPath: string;
  checkBody: string;
  checkPassive: boolean;
  proxyProtocol: 'none' | 'v1' | 'v2';
  cipherSuite: 'recommended' | 'legacy' | 'none';
  sslCert: string | null;
  sslKey: string | null;
  sslCommonname: string;
  sslFingerprint: string;
  /** Port of the active check of a udp config's nodes (TCP or HTTP on the node's address). */
  udpCheckPort: number;
  /** Seconds of silence after which a UDP session ends (read-only on the wire). */
  udpSessionTimeout: number;
}

/** `none` is the mode of nodes of a udp config; it serves like `accept`. */
export type NodeMode = 'accept' | 'reject' | 'drain' | 'backup' | 'none';
export type NodeStatus = 'unknown' | 'UP' | 'DOWN';

export interface NbNode {
  id: number;
  configId: number;
  nodebalancerId: number;
  label: string;
  address: string;
  weight: number;
  mode: NodeMode;
  status: NodeStatus;
}

export type NewConfig = Omit<NbConfig, 'id' | 'nodebalancerId'>;
export type NewNode = Pick<NbNode, 'label' | 'address' | 'weight' | 'mode'>;

export const configDefaults: NewConfig = {
  port: 80,
  protocol: 'http',
  algorithm: 'roundrobin',
  stickiness: 'none',
  check: 'none',
  checkInterval: 31,
  checkTimeout: 30,
  checkAttempts: 3,
  checkPath: '',
  checkBody: '',
  checkPassive: true,
  proxyProtocol: 'none',
  cipherSuite: 'recommended',
  sslCert: null,
  sslKey: null,
  sslCommonname: '',
  sslFingerprint: '',
  udpCheckPort: 80,
  udpSessionTimeout: 16,
};

/** What the control plane knows of one data plane serving NodeBalancers (GET /v4/fulcrum/dataplanes). */
export interface DataplaneStatus {
  id: string;
  region: string;
  connected: boolean;
  /**
   * The control-plane replica holding its stream ('' with one control plane): while that
   * replica's heartbeat stops, the host reads disconnected (docs/architecture.md, "The streams").
   */
  replica: string;
  versionApplied: number;
  lastError: string | null;
  lastErrorAt: number | null;
  lastSeen: number | null;
}
