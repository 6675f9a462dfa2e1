import type { DbEndpointSpec } from './endpoint-model.js';

/**
 * The data plane's own, validated and frozen view of a ConfigSnapshot. Everything the proxy
 * needs is parsed once here (addresses split, regexes compiled, seconds turned into ms), so the
 * hot path never re-parses configuration.
 */
export type Protocol = 'tcp' | 'http' | 'https' | 'udp';
export type Algorithm = 'roundrobin' | 'leastconn' | 'source' | 'ring_hash';
export type Stickiness = 'none' | 'table' | 'http_cookie' | 'session' | 'source_ip';
export type CheckType = 'none' | 'connection' | 'http' | 'http_body';
export type ProxyProtocol = 'none' | 'v1' | 'v2';
export type CipherSuite = 'recommended' | 'legacy' | 'none';
/** `none` (nodes of a udp config) serves like `accept`. */
export type NodeMode = 'accept' | 'reject' | 'drain' | 'backup' | 'none';
export type NodeBalancerType = 'common' | 'premium';

export interface NodeSpec {
  readonly id: number;
  readonly label: string;
  /** ip:port as sent; used as the identity of a node's health and pooled connections. */
  readonly address: string;
  readonly host: string;
  readonly port: number;
  readonly weight: number;
  readonly mode: NodeMode;
}

export interface ConfigSpec {
  readonly id: number;
  readonly nodebalancerId: number;
  readonly ip: string;
  /** The NodeBalancer's IPv6 address, served as well ('' = none). */
  readonly ip6: string;
  readonly port: number;
  readonly protocol: Protocol;
  readonly algorithm: Algorithm;
  readonly stickiness: Stickiness;
  readonly check: CheckType;
  readonly checkIntervalMs: number;
  readonly checkTimeoutMs: number;
  readonly checkAttempts: number;
  readonly checkPath: string;
  readonly checkBody: RegExp | null;
  readonly checkPassive: boolean;
  readonly proxyProtocol: ProxyProtocol;
  readonly cipherSuite: CipherSuite;
  readonly sslCert: string;
  readonly sslKey: string;
  readonly nodes: readonly NodeSpec[];
  /** udp: the port each node's active check connects to (TCP or HTTP on the node's host). */
  readonly udpCheckPort: number;
  /** udp: silence after which a client flow's session ends. */
  readonly udpSessionTimeoutMs: number;
  /** Key of the listener this config is served on: `ip:port`, `udp/ip:port` for udp. */
  readonly listenKey: string;
  /** The same for the IPv6 listener ('' when the NodeBalancer has no IPv6 address). */
  readonly listenKey6: string;
  /** Stable text of the health-check parameters; a change restarts the checker. */
  readonly checkKey: string;
  /** Digest of the whole config's text (and its NodeBalancer's id); equal means nothing to do. */
  readonly fingerprint: string;
}

export interface NodeBalancerSpec {
  readonly id: number;
  readonly label: string;
  readonly ipv4: string;
  /** '' when the NodeBalancer has none. */
  readonly ipv6: string;
  readonly clientConnThrottle: number;
  /** New UDP sessions per second per client IP; 0 = off. */
  readonly clientUdpSessThrottle: number;
  readonly type: NodeBalancerType;
  readonly configs: readonly ConfigSpec[];
}

export interface SnapshotSpec {
  readonly version: number;
  readonly nodebalancers: readonly NodeBalancerSpec[];
  readonly databaseEndpoints: readonly DbEndpointSpec[];
}
