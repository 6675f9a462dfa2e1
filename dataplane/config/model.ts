import type { DbEndpointSpec } from './endpoint-model.js';

/**
 * The data plane's own, validated and frozen view of a ConfigSnapshot. Everything the proxy
 * needs is parsed once here (addresses split, regexes compiled, seconds turned into ms), so the
 * hot path never re-parses configuration.
 */
export type Protocol = 'tcp' | 'http' | 'https';
export type Algorithm = 'roundrobin' | 'leastconn' | 'source';
export type Stickiness = 'none' | 'table' | 'http_cookie';
export type CheckType = 'none' | 'connection' | 'http' | 'http_body';
export type ProxyProtocol = 'none' | 'v1' | 'v2';
export type CipherSuite = 'recommended' | 'legacy';
export type NodeMode = 'accept' | 'reject' | 'drain' | 'backup';

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
  /** Key of the listener this config is served on: `ip:port`. */
  readonly listenKey: string;
  /** Stable text of the health-check parameters; a change restarts the checker. */
  readonly checkKey: string;
  /** Stable text of the whole config (and its NodeBalancer's id); equal means nothing to do. */
  readonly fingerprint: string;
}

export interface NodeBalancerSpec {
  readonly id: number;
  readonly label: string;
  readonly ipv4: string;
  readonly clientConnThrottle: number;
  readonly configs: readonly ConfigSpec[];
}

export interface SnapshotSpec {
  readonly version: number;
  readonly nodebalancers: readonly NodeBalancerSpec[];
  readonly databaseEndpoints: readonly DbEndpointSpec[];
}
