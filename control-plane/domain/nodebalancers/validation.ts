import { X509Certificate, createPrivateKey } from 'node:crypto';
import { ErrorCollector } from '../../../lib/errors.js';
import { isIpv4 } from '../../../lib/ipv4.js';
import { checkField, checkFields, checkValue, fieldPath, type Body, type FieldSpec } from '../validation/fields.js';
import type { NewConfig, NewNode, NbConfig, NbNode, NodeBalancer } from './model.js';
import type { BackendCheck } from './backend-networks.js';
import { configDefaults } from './model.js';
import { regexHazard } from './regex-safety.js';
import { nodeBalancerReasons } from './reasons.js';
import { nodeBalancerTypeIds, typeLimits } from './types.js';
import { protocolRules } from './validation-udp.js';

/**
 * Validation of NodeBalancer, Config and Node request bodies: one spec per field plus the
 * cross-field rules; every violation is collected with its field path
 * (`configs[0].nodes[1].address`) so a client sees them all in one 400.
 */

export { nodeBalancerReasons };

const R = nodeBalancerReasons;

const enums = {
  protocol: ['http', 'https', 'tcp', 'udp'],
  algorithm: ['roundrobin', 'leastconn', 'source', 'ring_hash'],
  stickiness: ['none', 'table', 'http_cookie', 'session', 'source_ip'],
  check: ['none', 'connection', 'http', 'http_body'],
  proxy_protocol: ['none', 'v1', 'v2'],
  cipher_suite: ['recommended', 'legacy', 'none'],
  mode: ['accept', 'reject', 'drain', 'backup', 'none'],
  type: nodeBalancerTypeIds,
} as const;

const int = (f: string, min: number, max: number): FieldSpec => ({
  type: { is: 'integer', reason: R.integer(f) },
  range: { min, max, reason: R.between(f, min, max) },
});
const oneOf = (f: keyof typeof enums): FieldSpec => ({ oneOf: { values: enums[f], reason: R.oneOf(f, enums[f].join(', ')) } });
const str = (f: string, max: number): FieldSpec => ({ type: { is: 'string', reason: R.string(f) }, range: { max, reason: R.tooLong(f, max) } });

const isRegExp = (s: string): boolean => {
  try {
    new RegExp(s);
    return true;
  } catch {
    return false;
  }
};

// A tenant's regex runs on every data plane: refuse the shapes that backtrack exponentially.
const hazardReasons = { nested_repeat: R.checkBodyNested, repeated_alternation: R.checkBodyAlternation, backreference: R.checkBodyBackref };
const checkBody = (v: string): string | undefined => {
  if (!isRegExp(v)) return R.checkBodyRegex;
  const hazard = regexHazard(v);
  return hazard === null ? undefined : hazardReasons[hazard];
};

const nbLabel: FieldSpec = {
  null: 'absent',
  type: { is: 'string', reason: R.nbLabelType },
  range: { min: 3, max: 32, reason: R.nbLabelLength },
  pattern: { re: /^[a-zA-Z0-9_-]+$/, reason: R.nbLabelChars },
};
const throttle = int('client_conn_throttle', 0, 20);
const udpThrottle = int('client_udp_sess_throttle', 0, 20);
const tag: FieldSpec = { type: { is: 'string', reason: R.tag }, range: { min: 3, max: 50, reason: R.tag } };

/** `ip:port` with a dotted IPv4 (no leading zeros) and a port 1..65535. */
function addressViolation(v: string): string | undefined {
  const m = /^(\d{1,3}(?:\.\d{1,3}){3}):(\d{1,5})$/.exec(v);
  if (!m || !isIpv4(m[1]!)) return R.addressFormat;
  const port = Number(m[2]);
  return port < 1 || port > 65535 ? R.addressPort : undefined;
}

const nodeSpecs = {
  label: {
    required: R.labelRequired,
    type: { is: 'string', reason: R.labelString },
    range: { min: 3, max: 32, reason: R.nodeLabelLength },
    pattern: { re: /^[a-zA-Z0-9_.-]+$/, reason: R.nodeLabelChars },
  },
  address: { required: R.addressRequired, type: { is: 'string', reason: R.addressType }, check: addressViolation },
  weight: int('weight', 1, 255),
  mode: oneOf('mode'),
} satisfies Record<string, FieldSpec>;

/** Config fields after `port` (whose uniqueness is checked first), with the model key each sets. */
const configSpecs = {
  protocol: oneOf('protocol'),
  algorithm: oneOf('algorithm'),
  stickiness: oneOf('stickiness'),
  check: oneOf('check'),
  proxy_protocol: oneOf('proxy_protocol'),
  cipher_suite: oneOf('cipher_suite'),
  check_interval: int('check_interval', 2, 3600),
  check_timeout: int('check_timeout', 1, 30),
  check_attempts: int('check_attempts', 1, 30),
  check_path: { ...str('check_path', 255), pattern: { re: /^[a-zA-Z0-9/\-%?&=.]*$/, reason: R.checkPathChars } },
  check_body: { ...str('check_body', 1024), check: checkBody },
  check_passive: { type: { is: 'boolean', reason: R.checkPassive } },
  udp_check_port: int('udp_check_port', 1, 65535),
} satisfies Record<string, FieldSpec>;

const configKeys: Record<keyof typeof configSpecs, keyof NewConfig> = {
  protocol: 'protocol', algorithm: 'algorithm', stickiness: 'stickiness', check: 'check',
  proxy_protocol: 'proxyProtocol', cipher_suite: 'cipherSuite', check_interval: 'checkInterval',
  check_timeout: 'checkTimeout', check_attempts: 'checkAttempts', check_path: 'checkPath',
  check_body: 'checkBody', check_passive: 'checkPassive', udp_check_port: 'udpCheckPort',
};

function validateTags(errs: ErrorCollector, v: unknown): string[] | undefined {
  if (v === undefined || v === null) return v === null ? [] : undefined;
  if (!Array.isArray(v)) {
    errs.add('tags', R.tagsArray);
    return undefined;
  }
  const out: string[] = [];
  v.forEach((t, i) => {
    const ok = checkValue<string>(errs, `tags[${i}]`, t, tag);
    if (ok !== undefined) out.push(ok);
  });
  return [...new Set(out)];
}

/**
 * Validates a node body. `base` is the current node on update (partial bodies keep the other
 * fields), undefined on create (label and address required). An address sent must also lie in
 * the backend networks (docs/security/api.md); a stored one is not checked again.
 */
export function validateNode(errs: ErrorCollector, b: unknown, prefix: string, base?: NbNode, backends?: BackendCheck, protocol?: NbConfig['protocol']): NewNode | undefined {
  if (b === null || typeof b !== 'object' || Array.isArray(b)) {
    errs.add(prefix || undefined, R.nodeObject);
    return undefined;
  }
  const before = errs.errors.length;
  const specs = base ? { ...nodeSpecs, label: { ...nodeSpecs.label, required: undefined }, address: { ...nodeSpecs.address, required: undefined } } : nodeSpecs;
  const v = checkFields(errs, b as Body, specs, prefix);
  if (errs.errors.length > before) return undefined;
  const address = v.address as string | undefined;
  if (address && backends && !backends.allowsAddress(address)) return void errs.add(fieldPath(prefix, 'address'), R.addressNotAllowed);
  // Nodes of a udp config have mode none (served like accept); the other modes stay available.
  if (v.mode === 'none' && protocol !== undefined && protocol !== 'udp') return void errs.add(fieldPath(prefix, 'mode'), R.modeNoneNeedsUdp);
  return {
    label: (v.label as string | undefined) ?? base!.label,
    address: (v.address as string | undefined) ?? base!.address,
    weight: (v.weight as number | undefined) ?? base?.weight ?? 50,
    mode: (v.mode as NewNode['mode'] | undefined) ?? base?.mode ?? (protocol === 'udp' ? 'none' : 'accept'),
  };
}

/**
 * Whether a udp config's health checks of a node may go where they go: the node's IP at
 * udp_check_port (dataplane/health/checker.ts), which must pass the same backend rules as the
 * node's own address, or udp_check_port would reach a port the address rules refuse (the control
 * plane's own listeners; docs/security/api.md).
 */
export function udpCheckAllowed(cfg: Pick<NbConfig, 'protocol' | 'udpCheckPort'>, nodeAddress: string, backends?: BackendCheck): boolean {
  if (cfg.protocol !== 'udp' || !backends) return true;
  return backends.allowsAddress(`${nodeAddress.slice(0, nodeAddress.lastIndexOf(':'))}:${cfg.udpCheckPort}`);
}

/** Adds the udp_check_port error at `field` when any of `nodes` would be health-checked where no backend may be. */
export function checkUdpCheckPort(errs: ErrorCollector, field: string, cfg: Pick<NbConfig, 'protocol' | 'udpCheckPort'>, nodes: readonly { address: string }[], backends?: BackendCheck): void {
  if (nodes.some((n) => !udpCheckAllowed(cfg, n.address, backends))) errs.add(field, R.udpCheckNotAllowed(cfg.udpCheckPort));
}

/** Parses the certificate (first of a chain) and checks that the key matches it. */
function inspectCertificate(cert: string, key: string): { commonname: string; fingerprint: string } | { certError?: string; keyError?: string } {
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(cert);
  } catch {
    return { certError: R.certInvalid };
  }
  let pk;
  try {
    pk = createPrivateKey(key);
  } catch {
    return { keyError: R.keyInvalid };
  }
  if (!x509.checkPrivateKey(pk)) return { keyError: R.keyMismatch };
  const cn = /(?:^|\n)CN=([^\n]*)/.exec(x509.subject)?.[1] ?? '';
  return { commonname: cn, fingerprint: x509.fingerprint };
}

/** The rules between fields of a config whose fields are each valid; fills in the certificate's details. */
function crossFieldRules(errs: ErrorCollector, cur: NewConfig, body: Body, prefix: string, base?: NbConfig): void {
  const at = (f: string) => fieldPath(prefix, f);
  protocolRules(errs, cur, body, base, at);
  if (cur.checkInterval <= cur.checkTimeout) errs.add(at('check_interval'), R.intervalOverTimeout);
  if ((cur.check === 'http' || cur.check === 'http_body') && !cur.checkPath) errs.add(at('check_path'), R.httpPathRequired);
  if (cur.check === 'http_body' && !cur.checkBody) errs.add(at('check_body'), R.httpBodyRequired);
  if (cur.proxyProtocol !== 'none' && cur.protocol !== 'tcp') errs.add(at('proxy_protocol'), R.proxyNeedsTcp);
  if (cur.stickiness === 'http_cookie' && cur.protocol === 'tcp') errs.add(at('stickiness'), R.cookieNeedsHttp);
  if (cur.protocol === 'https') {
    if (!cur.sslCert) errs.add(at('ssl_cert'), R.certRequired);
    if (!cur.sslKey) errs.add(at('ssl_key'), R.keyRequired);
    if (cur.sslCert && cur.sslKey) {
      const info = inspectCertificate(cur.sslCert, cur.sslKey);
      if ('commonname' in info) {
        cur.sslCommonname = info.commonname;
        cur.sslFingerprint = info.fingerprint;
      } else {
        if (info.certError) errs.add(at('ssl_cert'), info.certError);
        if (info.keyError) errs.add(at('ssl_key'), info.keyError);
      }
    }
  } else {
    const sent = (v: unknown) => v !== undefined && v !== null && v !== '' && v !== '<REDACTED>';
    if (sent(body.ssl_cert)) errs.add(at('ssl_cert'), R.httpsOnly('ssl_cert'));
    if (sent(body.ssl_key)) errs.add(at('ssl_key'), R.httpsOnly('ssl_key'));
    // Switching away from https drops the stored certificate.
    cur.sslCert = null;
    cur.sslKey = null;
    cur.sslCommonname = '';
    cur.sslFingerprint = '';
  }
}

/**
 * Validates a config body into a complete config. `base` is the stored config on update and
 * rebuild (fields left out keep their values); undefined on create (defaults apply).
 * `usedPorts` are the other configs' ports on the same NodeBalancer.
 */
export function validateConfig(errs: ErrorCollector, b: unknown, prefix: string, usedPorts: number[], base?: NbConfig): NewConfig | undefined {
  if (b === null || typeof b !== 'object' || Array.isArray(b)) {
    errs.add(prefix || undefined, R.configObject);
    return undefined;
  }
  const body = b as Body;
  const before = errs.errors.length;
  const cur: NewConfig = base ? { ...base } : { ...configDefaults };
  delete (cur as any).id;
  delete (cur as any).nodebalancerId;

  const beforePort = errs.errors.length;
  const port = checkField<number>(errs, body, 'port', int('port', 1, 65535), prefix);
  if (port !== undefined) cur.port = port;
  // An invalid port is reported once; checking the kept (default or stored) port for uniqueness
  // would add a second, misleading error about a port the client never sent.
  if (errs.errors.length === beforePort && usedPorts.includes(cur.port)) errs.add(fieldPath(prefix, 'port'), R.portUnique);
  const v = checkFields(errs, body, configSpecs, prefix);
  for (const [wire, key] of Object.entries(configKeys)) {
    const value = v[wire as keyof typeof configSpecs];
    if (value !== undefined) (cur as Record<string, unknown>)[key] = value;
  }

  // ssl_cert / ssl_key: "<REDACTED>" (what GET returns) keeps what is stored, so a client may
  // send back a config it read; null or "" clears it (an error later if protocol stays https).
  for (const f of ['ssl_cert', 'ssl_key'] as const) {
    const value = body[f];
    if (value === undefined || value === '<REDACTED>') continue;
    const key = f === 'ssl_cert' ? 'sslCert' : 'sslKey';
    if (value === null || value === '') cur[key] = null;
    else if (typeof value !== 'string') errs.add(fieldPath(prefix, f), R.pem(f));
    else if (value.length > 64 * 1024) errs.add(fieldPath(prefix, f), R.pemTooLong(f));
    else cur[key] = value;
  }

  if (errs.errors.length === before) crossFieldRules(errs, cur, body, prefix, base);
  if (errs.errors.length > before) return undefined;
  return cur;
}

export interface NodeBalancerCreateInput {
  /** Undefined when the client sent none: the service names it balancer<ID>. */
  label?: string;
  region: string;
  clientConnThrottle: number;
  clientUdpSessThrottle: number;
  type: NodeBalancer['type'];
  tags: string[];
  configs: { config: NewConfig; nodes: NewNode[] }[];
}

/** The configs (each with its nodes) of a NodeBalancer create. */
function validateCreateConfigs(errs: ErrorCollector, raw: unknown, type: NodeBalancer['type'], backends?: BackendCheck): NodeBalancerCreateInput['configs'] {
  const configs: NodeBalancerCreateInput['configs'] = [];
  if (raw === undefined || raw === null) return configs;
  if (!Array.isArray(raw)) errs.add('configs', R.configsArray);
  else if (raw.length > 50) errs.add('configs', R.configsMax);
  else {
    const ports: number[] = [];
    raw.forEach((c, i) => {
      const cfg = validateConfig(errs, c, `configs[${i}]`, ports);
      const rawNodes = c && typeof c === 'object' ? (c as Body).nodes : undefined;
      const nodes: NewNode[] = [];
      // Each config given at create needs a unique port and at least one node (docs/compatibility.md).
      if (rawNodes === undefined || rawNodes === null || (Array.isArray(rawNodes) && rawNodes.length === 0)) {
        errs.add(`configs[${i}].nodes`, R.nodesRequired);
      } else if (!Array.isArray(rawNodes)) errs.add(`configs[${i}].nodes`, R.nodesArray);
      else if (rawNodes.length > 255) errs.add(`configs[${i}].nodes`, R.nodesMax);
      else if (rawNodes.length > typeLimits(type).nodesPerConfig) errs.add(`configs[${i}].nodes`, R.typeMax(type, typeLimits(type).nodesPerConfig));
      else rawNodes.forEach((n, j) => {
        const node = validateNode(errs, n, `configs[${i}].nodes[${j}]`, undefined, backends, cfg?.protocol);
        if (node) nodes.push(node);
      });
      if (cfg) {
        checkUdpCheckPort(errs, `configs[${i}].udp_check_port`, cfg, nodes, backends);
        ports.push(cfg.port);
        configs.push({ config: cfg, nodes });
      }
    });
  }
  return configs;
}

/** POST /nodebalancers: the whole body, configs and nodes included; throws every violation at once. */
export function validateNodeBalancerCreate(body: Body, look: { regionExists(id: string): boolean; labelTaken(label: string): boolean; backends?: BackendCheck }): NodeBalancerCreateInput {
  const errs = new ErrorCollector();
  const region = checkField<string>(errs, body, 'region', {
    required: R.regionRequired,
    null: 'absent',
    check: (v) => (typeof v === 'string' && look.regionExists(v) ? undefined : R.regionInvalid),
  });
  const label = checkField<string>(errs, body, 'label', { ...nbLabel, check: (v) => (look.labelTaken(v) ? R.nbLabelUnique : undefined) });
  const clientConnThrottle = checkField<number>(errs, body, 'client_conn_throttle', throttle) ?? 0;
  const clientUdpSessThrottle = checkField<number>(errs, body, 'client_udp_sess_throttle', udpThrottle) ?? 0;
  const type = checkField<NodeBalancer['type']>(errs, body, 'type', { null: 'absent', ...oneOf('type') }) ?? 'common';
  const tags = validateTags(errs, body.tags) ?? [];
  // Refused rather than dropped: a client that asks for a firewall or a VPC must not get a NodeBalancer without one.
  checkField(errs, body, 'firewall_id', { null: 'absent', check: () => R.firewalls });
  checkField(errs, body, 'vpcs', { null: 'absent', check: (v) => (Array.isArray(v) && v.length === 0 ? undefined : R.vpcs) });
  const configs = validateCreateConfigs(errs, body.configs, type, look.backends);
  errs.throwIfAny();
  return { label, region: region!, clientConnThrottle, clientUdpSessThrottle, type, tags, configs };
}

/** PUT /nodebalancers/{id}: the fields sent, checked against `current` for label uniqueness. */
export function validateNodeBalancerUpdate(body: Body, look: { current: string; labelTaken(label: string): boolean }): { label?: string; clientConnThrottle?: number; clientUdpSessThrottle?: number; tags?: string[] } {
  const errs = new ErrorCollector();
  const label = checkField<string>(errs, body, 'label', { ...nbLabel, check: (v) => (v !== look.current && look.labelTaken(v) ? R.nbLabelUnique : undefined) });
  const clientConnThrottle = checkField<number>(errs, body, 'client_conn_throttle', throttle);
  const clientUdpSessThrottle = checkField<number>(errs, body, 'client_udp_sess_throttle', udpThrottle);
  const tags = validateTags(errs, body.tags);
  errs.throwIfAny();
  return { label, clientConnThrottle, clientUdpSessThrottle, tags };
}

/**
 * The node list of a config rebuild: listed nodes with an id are updates of `existing` nodes,
 * nodes without one are creates.
 */
export function validateRebuildNodes(errs: ErrorCollector, raw: unknown, existing: Map<number, NbNode>, backends?: BackendCheck, protocol?: NbConfig['protocol']): { updates: { id: number; node: NewNode }[]; creates: NewNode[] } {
  const updates: { id: number; node: NewNode }[] = [];
  const creates: NewNode[] = [];
  if (!Array.isArray(raw)) {
    errs.add('nodes', R.rebuildNodes);
    return { updates, creates };
  }
  const seen = new Set<number>();
  raw.forEach((n, i) => {
    const prefix = `nodes[${i}]`;
    const id = n && typeof n === 'object' ? (n as Body).id : undefined;
    if (id !== undefined && id !== null) {
      const base = typeof id === 'number' ? existing.get(id) : undefined;
      if (!base) return errs.add(`${prefix}.id`, R.nodeNotInConfig);
      if (seen.has(base.id)) return errs.add(`${prefix}.id`, R.nodeTwice);
      seen.add(base.id);
      const node = validateNode(errs, n, prefix, base, backends, protocol);
      if (node) updates.push({ id: base.id, node });
    } else {
      const node = validateNode(errs, n, prefix, undefined, backends, protocol);
      if (node) creates.push(node);
    }
  });
  return { updates, creates };
}
