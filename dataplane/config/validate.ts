import { isIpv6 } from '../../lib/ipv6.js';
import { isIP } from 'node:net';
import { createSecureContext, type SecureContext } from 'node:tls';
import { X509Certificate, createHash, createPrivateKey } from 'node:crypto';
import { ErrorCollector, FulcrumError } from '../../lib/errors.js';
import type {
  Algorithm, CheckType, CipherSuite, ConfigSpec, NodeBalancerSpec, NodeBalancerType, NodeMode, NodeSpec, Protocol,
  ProxyProtocol, SnapshotSpec, Stickiness,
} from './model.js';
import { tlsOptions } from './cipher-suites.js';
import { validateEndpoints, type EndpointsInput } from './validate-endpoints.js';
import { LruMap } from '../../lib/lru.js';

/**
 * A snapshot as it arrives over gRPC (proto-loader camelCase, defaults on) or from the state
 * file. Every field is optional here because a snapshot is untrusted input: missing fields take
 * the API defaults, wrong ones are reported, never thrown past apply().
 */
export interface SnapshotInput {
  version?: number | string;
  nonce?: string;
  /** Incremental snapshot (docs/dataplane.md, "Incremental snapshots"): see validateDelta. */
  incremental?: boolean;
  baseVersion?: number | string;
  removedNodebalancers?: Array<number | string>;
  databaseEndpointsChanged?: boolean;
  nodebalancers?: Array<{
    id?: number | string;
    label?: string;
    ipv4?: string;
    ipv6?: string;
    clientConnThrottle?: number;
    clientUdpSessThrottle?: number;
    type?: string;
    configs?: Array<{
      id?: number | string;
      port?: number;
      protocol?: string;
      algorithm?: string;
      stickiness?: string;
      check?: string;
      checkInterval?: number;
      checkTimeout?: number;
      checkAttempts?: number;
      checkPath?: string;
      checkBody?: string;
      checkPassive?: boolean;
      proxyProtocol?: string;
      cipherSuite?: string;
      sslCert?: string;
      sslKey?: string;
      udpCheckPort?: number;
      udpSessionTimeout?: number;
      nodes?: Array<{ id?: number | string; label?: string; address?: string; weight?: number; mode?: string }>;
    }>;
  }>;
  databaseEndpoints?: EndpointsInput;
}

function oneOf<T extends string>(errs: ErrorCollector, field: string, value: string | undefined, allowed: readonly T[], dflt: T): T {
  const v = value === undefined || value === '' ? dflt : value;
  if (!(allowed as readonly string[]).includes(v)) {
    errs.add(field, `must be one of ${allowed.join(', ')}; got ${JSON.stringify(value)}`);
    return dflt;
  }
  return v as T;
}

/** Splits `ip:port` or `[v6]:port`; undefined when it is not a literal address with a port. */
function parseAddress(address: string): { host: string; port: number } | undefined {
  const m = /^\[([0-9a-fA-F:.]+)\]:(\d{1,5})$/.exec(address) ?? /^([0-9.]+):(\d{1,5})$/.exec(address);
  if (!m) return undefined;
  const port = Number(m[2]);
  if (isIP(m[1]) === 0 || port < 1 || port > 65535) return undefined;
  return { host: m[1], port };
}

// Certificates are re-sent in every snapshot; remember verdicts so a big snapshot stays cheap.
const certVerdicts = new LruMap<string, string | null>(10_000);

/** Checks that the PEM parses and the key belongs to the certificate; returns a reason or null. */
function checkCertificate(cert: string, key: string, suite: CipherSuite): string | null {
  const id = createHash('sha256').update(cert).update('\0').update(key).update('\0').update(suite).digest('hex');
  const known = certVerdicts.get(id);
  if (known !== undefined) return known;
  const verdict = verifyCertificate(cert, key, suite);
  certVerdicts.set(id, verdict);
  return verdict;
}

function verifyCertificate(cert: string, key: string, suite: CipherSuite): string | null {
  try {
    const x = new X509Certificate(cert);
    const k = createPrivateKey(key);
    if (!x.checkPrivateKey(k)) return 'ssl_key does not match ssl_cert';
    createSecureContext(tlsOptions(cert, key, suite)) as SecureContext;
    return null;
  } catch (e) {
    return `certificate or key does not parse: ${(e as Error).message}`;
  }
}

type NodeBalancerInput = NonNullable<SnapshotInput['nodebalancers']>[number];

/**
 * Who already holds a listen key (`ip:port`) or a config id: the rest of a snapshot, or, for an
 * incremental one, also what the data plane serves outside the NodeBalancers it replaces.
 */
export interface Claims {
  listen: Pick<Map<string, string>, 'get' | 'set'>;
  configIds: { has(id: number): boolean; add(id: number): unknown };
}

/** Validates one NodeBalancer at path `p` into `errs`, claiming its listen keys and config ids. */
export function validateNodeBalancer(nb: NodeBalancerInput, p: string, errs: ErrorCollector, claims: Claims): NodeBalancerSpec {
  const seenListen = claims.listen;
  const seenConfigIds = claims.configIds;
  const nbId = Number(nb.id);
  if (!Number.isSafeInteger(nbId) || nbId <= 0) errs.add(`${p}.id`, 'must be a positive integer');
  const ipv4 = nb.ipv4 ?? '';
  if (isIP(ipv4) !== 4) errs.add(`${p}.ipv4`, `must be an IPv4 address; got ${JSON.stringify(ipv4)}`);
  const ipv6 = nb.ipv6 ?? '';
  if (ipv6 !== '' && !isIpv6(ipv6)) errs.add(`${p}.ipv6`, `must be an IPv6 address or empty; got ${JSON.stringify(ipv6)}`);
  const throttle = nb.clientConnThrottle ?? 0;
  if (!Number.isInteger(throttle) || throttle < 0 || throttle > 1000) errs.add(`${p}.client_conn_throttle`, 'must be an integer 0..1000');
  const udpThrottle = nb.clientUdpSessThrottle ?? 0;
  if (!Number.isInteger(udpThrottle) || udpThrottle < 0 || udpThrottle > 1000) errs.add(`${p}.client_udp_sess_throttle`, 'must be an integer 0..1000');
  const type = oneOf<NodeBalancerType>(errs, `${p}.type`, nb.type, ['common', 'premium'], 'common');
  const configs: ConfigSpec[] = [];
  (nb.configs ?? []).forEach((c, j) => {
    const cp = `${p}.configs[${j}]`;
    const id = Number(c.id);
    if (!Number.isSafeInteger(id) || id <= 0) errs.add(`${cp}.id`, 'must be a positive integer');
    else if (seenConfigIds.has(id)) errs.add(`${cp}.id`, `duplicate config id ${id}`);
    seenConfigIds.add(id);
    const port = c.port ?? 0;
    if (!Number.isInteger(port) || port < 1 || port > 65535) errs.add(`${cp}.port`, `must be 1..65535; got ${port}`);
    const protocol = oneOf<Protocol>(errs, `${cp}.protocol`, c.protocol, ['tcp', 'http', 'https', 'udp'], 'http');
    // A udp socket and a tcp one may share ip:port; keyed apart, a protocol switch rebinds.
    const listenKey = protocol === 'udp' ? `udp/${ipv4}:${port}` : `${ipv4}:${port}`;
    const listenKey6 = ipv6 === '' ? '' : protocol === 'udp' ? `udp/${ipv6}:${port}` : `${ipv6}:${port}`;
    for (const key of listenKey6 === '' ? [listenKey] : [listenKey, listenKey6]) {
      const other = seenListen.get(key);
      if (other) errs.add(`${cp}.port`, `${key} is already used by ${other}`);
      seenListen.set(key, cp);
    }
    const algorithm = oneOf<Algorithm>(errs, `${cp}.algorithm`, c.algorithm, ['roundrobin', 'leastconn', 'source', 'ring_hash'], 'roundrobin');
    const stickiness = oneOf<Stickiness>(errs, `${cp}.stickiness`, c.stickiness, ['none', 'table', 'http_cookie', 'session', 'source_ip'], 'none');
    const check = oneOf<CheckType>(errs, `${cp}.check`, c.check, ['none', 'connection', 'http', 'http_body'], 'none');
    const proxyProtocol = oneOf<ProxyProtocol>(errs, `${cp}.proxy_protocol`, c.proxyProtocol, ['none', 'v1', 'v2'], 'none');
    const cipherSuite = oneOf<CipherSuite>(errs, `${cp}.cipher_suite`, c.cipherSuite, ['recommended', 'legacy', 'none'], 'recommended');
    const udpCheckPort = c.udpCheckPort || 80;
    const udpTimeout = c.udpSessionTimeout || 16;
    if (!Number.isInteger(udpCheckPort) || udpCheckPort < 1 || udpCheckPort > 65535) errs.add(`${cp}.udp_check_port`, 'must be 1..65535');
    if (!Number.isInteger(udpTimeout) || udpTimeout < 1 || udpTimeout > 3600) errs.add(`${cp}.udp_session_timeout`, 'must be 1..3600 seconds');
    if (stickiness === 'http_cookie' && protocol === 'tcp') errs.add(`${cp}.stickiness`, 'http_cookie needs protocol http or https');
    if (proxyProtocol !== 'none' && protocol !== 'tcp') errs.add(`${cp}.proxy_protocol`, 'needs protocol tcp');
    const interval = c.checkInterval || 31;
    const timeout = c.checkTimeout || 30;
    const attempts = c.checkAttempts || 3;
    if (!Number.isInteger(interval) || interval < 1 || interval > 3600) errs.add(`${cp}.check_interval`, 'must be 1..3600 seconds');
    if (!Number.isInteger(timeout) || timeout < 1 || timeout > 30) errs.add(`${cp}.check_timeout`, 'must be 1..30 seconds');
    if (!Number.isInteger(attempts) || attempts < 1 || attempts > 30) errs.add(`${cp}.check_attempts`, 'must be 1..30');
    const rawPath = c.checkPath || '/';
    if (!/^[a-zA-Z0-9/\-%?&=._~]*$/.test(rawPath)) errs.add(`${cp}.check_path`, `has characters outside [a-zA-Z0-9/-%?&=.]; got ${JSON.stringify(rawPath)}`);
    const checkPath = rawPath.startsWith('/') ? rawPath : `/${rawPath}`;
    let checkBody: RegExp | null = null;
    if (check === 'http_body') {
      if (!c.checkBody) errs.add(`${cp}.check_body`, 'is required for check http_body');
      else {
        try {
          checkBody = new RegExp(c.checkBody);
        } catch (e) {
          errs.add(`${cp}.check_body`, `regex does not compile: ${(e as Error).message}`);
        }
      }
    }
    const sslCert = c.sslCert ?? '';
    const sslKey = c.sslKey ?? '';
    if (protocol === 'https') {
      if (!sslCert || !sslKey) errs.add(`${cp}.ssl_cert`, 'https needs ssl_cert and ssl_key');
      else {
        const reason = checkCertificate(sslCert, sslKey, cipherSuite);
        if (reason) errs.add(`${cp}.ssl_cert`, reason);
      }
    }
    const nodes: NodeSpec[] = [];
    const seenNodes = new Set<number>();
    (c.nodes ?? []).forEach((n, k) => {
      const np = `${cp}.nodes[${k}]`;
      const nid = Number(n.id);
      if (!Number.isSafeInteger(nid) || nid <= 0) errs.add(`${np}.id`, 'must be a positive integer');
      else if (seenNodes.has(nid)) errs.add(`${np}.id`, `duplicate node id ${nid}`);
      seenNodes.add(nid);
      const addr = parseAddress(n.address ?? '');
      if (!addr) errs.add(`${np}.address`, `must be ip:port; got ${JSON.stringify(n.address)}`);
      const weight = n.weight || 1;
      if (!Number.isInteger(weight) || weight < 1 || weight > 255) errs.add(`${np}.weight`, 'must be 1..255');
      const mode = oneOf<NodeMode>(errs, `${np}.mode`, n.mode, ['accept', 'reject', 'drain', 'backup', 'none'], 'accept');
      nodes.push(Object.freeze({
        id: nid, label: n.label ?? '', address: n.address ?? '', host: addr?.host ?? '', port: addr?.port ?? 0, weight, mode,
      }));
    });
    const checkKey = [check, interval, timeout, attempts, checkPath, c.checkBody ?? '', proxyProtocol, protocol === 'udp' ? udpCheckPort : 0,
      nodes.map((n) => `${n.id}@${n.address}/${n.mode}`).join(',')].join('|');
    configs.push(Object.freeze({
      id, nodebalancerId: nbId, ip: ipv4, ip6: ipv6, port, protocol, algorithm, stickiness, check,
      checkIntervalMs: interval * 1000, checkTimeoutMs: timeout * 1000, checkAttempts: attempts, checkPath, checkBody,
      checkPassive: c.checkPassive ?? true, proxyProtocol, cipherSuite, sslCert, sslKey,
      nodes: Object.freeze(nodes), udpCheckPort, udpSessionTimeoutMs: udpTimeout * 1000, listenKey, listenKey6, checkKey,
      // A digest, not the text: 20,000 configs' text (certificates and keys included) held in
      // every process of a data plane cost tens of MB (docs/dataplane.md, "Large states").
      fingerprint: createHash('sha256').update(`${nbId}|${listenKey}|${listenKey6}|${JSON.stringify(c)}`).digest('base64'),
    }));
  });
  return Object.freeze({ id: nbId, label: nb.label ?? '', ipv4, ipv6, clientConnThrottle: throttle, clientUdpSessThrottle: udpThrottle, type, configs: Object.freeze(configs) });
}

/**
 * Validates a whole snapshot. Throws FulcrumError('invalid_config') listing every problem;
 * the caller keeps serving its previous snapshot and NACKs with that message.
 */
export function validateSnapshot(input: SnapshotInput): SnapshotSpec {
  const steps = validateWhole(input);
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}

/**
 * validateSnapshot that hands the event loop back (`pause`) after every `every` NodeBalancers:
 * a whole state of thousands of NodeBalancers must not starve the gRPC stream's keepalive
 * (docs/dataplane.md, "Large states").
 */
export async function validateSnapshotSliced(input: SnapshotInput, pause: () => Promise<void>, every: number): Promise<SnapshotSpec> {
  const steps = validateWhole(input);
  for (let n = 1; ; n++) {
    const r = steps.next();
    if (r.done) return r.value;
    if (n % every === 0) await pause();
  }
}

/** The whole-snapshot validation, one step per NodeBalancer. */
function* validateWhole(input: SnapshotInput): Generator<void, SnapshotSpec> {
  const errs = new ErrorCollector();
  const version = Number(input.version ?? 0);
  if (!Number.isSafeInteger(version) || version < 0) errs.add('version', 'must be a non-negative integer');
  const seenListen = new Map<string, string>();
  const seenConfigIds = new Set<number>();
  const nbs: NodeBalancerSpec[] = [];
  const list = input.nodebalancers ?? [];
  if (!Array.isArray(list)) throw new TypeError('nodebalancers is not a list');
  for (let i = 0; i < list.length; i++) {
    nbs.push(validateNodeBalancer(list[i]!, `nodebalancers[${i}]`, errs, { listen: seenListen, configIds: seenConfigIds }));
    yield;
  }
  const databaseEndpoints = validateEndpoints(input.databaseEndpoints ?? [], errs, seenListen);
  if (!errs.empty) {
    throw new FulcrumError('invalid_config', errs.errors);
  }
  return Object.freeze({ version, nodebalancers: Object.freeze(nbs), databaseEndpoints: Object.freeze(databaseEndpoints) });
}
