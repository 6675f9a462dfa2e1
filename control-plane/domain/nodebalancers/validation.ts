import { X509Certificate, createPrivateKey } from 'node:crypto';
import { ErrorCollector } from '../../../lib/errors.js';
import { isIpv4 } from '../../../lib/ipv4.js';
import { checkField, checkFields, checkValue, fieldPath, type Body, type FieldSpec } from '../validation/fields.js';
import type { NewConfig, NewNode, NbConfig, NbNode } from './model.js';
import type { BackendCheck } from './backend-networks.js';
import { configDefaults } from './model.js';
import { regexHazard } from './regex-safety.js';

/**
 * Validation of NodeBalancer, Config and Node request bodies: one spec per field plus the
 * cross-field rules; every violation is collected with its field path
 * (`configs[0].nodes[1].address`) so a client sees them all in one 400.
 */

/**
 * Every reason text a NodeBalancer request can be refused with. Clients and tests match on these
 * byte for byte: change one only on purpose, together with the inventory in
 * test/unit/api/error-inventory.test.ts.
 */
export const nodeBalancerReasons = {
  integer: (f: string) => `${f} must be an integer`,
  between: (f: string, min: number, max: number) => `${f} must be between ${min} and ${max}`,
  oneOf: (f: string, allowed: string) => `${f} must be one of ${allowed}`,
  string: (f: string) => `${f} must be a string`,
  tooLong: (f: string, max: number) => `${f} must be ${max} characters or fewer`,
  regionRequired: 'Region is required.',
  regionInvalid: 'region is not valid',
  nbLabelType: 'Label must be a string',
  nbLabelLength: 'Label must be between 3 and 32 characters.',
  nbLabelChars: "Label can't contain special characters or spaces.",
  nbLabelUnique: 'Label must be unique among your NodeBalancers',
  tagsArray: 'tags must be an array of strings',
  tag: 'Tags must be strings of 3 to 50 characters',
  firewalls: 'Firewalls are not supported by this server',
  configsArray: 'configs must be an array',
  configsMax: 'A NodeBalancer may have at most 50 configs',
  configObject: 'config must be an object',
  portUnique: 'Port must be unique.',
  checkPathChars: 'check_path may only contain letters, digits and / - % ? & = .',
  checkBodyRegex: 'check_body must be a valid regular expression',
  checkBodyNested: 'check_body must not repeat a group that repeats inside, such as (a+)+ (matching it can take exponential time)',
  checkBodyAlternation: 'check_body must not repeat an alternation, such as (a|ab)* (matching it can take exponential time); use a character class',
  checkBodyBackref: 'check_body must not use backreferences',
  checkPassive: 'check_passive must be a boolean',
  pem: (f: string) => `${f} must be a PEM string`,
  pemTooLong: (f: string) => `${f} is too long`,
  intervalOverTimeout: 'check_interval must be greater than check_timeout',
  httpPathRequired: 'An HTTP path is required.',
  httpBodyRequired: 'An HTTP body regex is required.',
  proxyNeedsTcp: 'proxy_protocol v1 and v2 require protocol tcp',
  cookieNeedsHttp: 'http_cookie stickiness requires protocol http or https',
  certRequired: 'SSL certificate is required when using HTTPS.',
  keyRequired: 'SSL key is required when using HTTPS.',
  certInvalid: 'Invalid SSL certificate: it must be a PEM encoded certificate',
  keyInvalid: 'Invalid SSL key: it must be a PEM encoded private key',
  keyMismatch: 'SSL key does not match the certificate',
  httpsOnly: (f: string) => `${f} is only allowed with protocol https`,
  nodesRequired: 'You must provide at least one back end node.',
  nodesArray: 'nodes must be an array',
  nodesMax: 'A config may have at most 255 nodes',
  rebuildNodes: 'nodes is required and must be an array',
  nodeNotInConfig: 'Node not found in this config',
  nodeTwice: 'Node listed twice',
  nodeObject: 'node must be an object',
  labelRequired: 'label is required',
  labelString: 'label must be a string',
  nodeLabelLength: 'Label should be between 3 and 32 characters.',
  nodeLabelChars: 'Label may only contain letters, numbers, periods, dashes, and underscores.',
  addressRequired: 'address is required',
  addressType: 'address must be a string of the form ip:port',
  addressFormat: 'Must be a valid IPv4 address followed by :port',
  addressPort: 'Port must be between 1 and 65535.',
  addressNotAllowed: 'This address is not allowed for a backend node on this server',
} as const;

const R = nodeBalancerReasons;

const enums = {
  protocol: ['http', 'https', 'tcp'],
  algorithm: ['roundrobin', 'leastconn', 'source'],
  stickiness: ['none', 'table', 'http_cookie'],
  check: ['none', 'connection', 'http', 'http_body'],
  proxy_protocol: ['none', 'v1', 'v2'],
  cipher_suite: ['recommended', 'legacy'],
  mode: ['accept', 'reject', 'drain', 'backup'],
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
} satisfies Record<string, FieldSpec>;

const configKeys: Record<keyof typeof configSpecs, keyof NewConfig> = {
  protocol: 'protocol', algorithm: 'algorithm', stickiness: 'stickiness', check: 'check',
  proxy_protocol: 'proxyProtocol', cipher_suite: 'cipherSuite', check_interval: 'checkInterval',
  check_timeout: 'checkTimeout', check_attempts: 'checkAttempts', check_path: 'checkPath',
  check_body: 'checkBody', check_passive: 'checkPassive',
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
export function validateNode(errs: ErrorCollector, b: unknown, prefix: string, base?: NbNode, backends?: BackendCheck): NewNode | undefined {
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
  return {
    label: (v.label as string | undefined) ?? base!.label,
    address: (v.address as string | undefined) ?? base!.address,
    weight: (v.weight as number | undefined) ?? base?.weight ?? 50,
    mode: (v.mode as NewNode['mode'] | undefined) ?? base?.mode ?? 'accept',
  };
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
function crossFieldRules(errs: ErrorCollector, cur: NewConfig, body: Body, prefix: string): void {
  const at = (f: string) => fieldPath(prefix, f);
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

  if (errs.errors.length === before) crossFieldRules(errs, cur, body, prefix);
  if (errs.errors.length > before) return undefined;
  return cur;
}

export interface NodeBalancerCreateInput {
  /** Undefined when the client sent none: the service names it balancer<ID>. */
  label?: string;
  region: string;
  clientConnThrottle: number;
  tags: string[];
  configs: { config: NewConfig; nodes: NewNode[] }[];
}

/** The configs (each with its nodes) of a NodeBalancer create. */
function validateCreateConfigs(errs: ErrorCollector, raw: unknown, backends?: BackendCheck): NodeBalancerCreateInput['configs'] {
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
      else rawNodes.forEach((n, j) => {
        const node = validateNode(errs, n, `configs[${i}].nodes[${j}]`, undefined, backends);
        if (node) nodes.push(node);
      });
      if (cfg) {
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
  const tags = validateTags(errs, body.tags) ?? [];
  checkField(errs, body, 'firewall_id', { null: 'absent', check: () => R.firewalls });
  const configs = validateCreateConfigs(errs, body.configs, look.backends);
  errs.throwIfAny();
  return { label, region: region!, clientConnThrottle, tags, configs };
}

/** PUT /nodebalancers/{id}: the fields sent, checked against `current` for label uniqueness. */
export function validateNodeBalancerUpdate(body: Body, look: { current: string; labelTaken(label: string): boolean }): { label?: string; clientConnThrottle?: number; tags?: string[] } {
  const errs = new ErrorCollector();
  const label = checkField<string>(errs, body, 'label', { ...nbLabel, check: (v) => (v !== look.current && look.labelTaken(v) ? R.nbLabelUnique : undefined) });
  const clientConnThrottle = checkField<number>(errs, body, 'client_conn_throttle', throttle);
  const tags = validateTags(errs, body.tags);
  errs.throwIfAny();
  return { label, clientConnThrottle, tags };
}

/**
 * The node list of a config rebuild: listed nodes with an id are updates of `existing` nodes,
 * nodes without one are creates.
 */
export function validateRebuildNodes(errs: ErrorCollector, raw: unknown, existing: Map<number, NbNode>, backends?: BackendCheck): { updates: { id: number; node: NewNode }[]; creates: NewNode[] } {
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
      const node = validateNode(errs, n, prefix, base, backends);
      if (node) updates.push({ id: base.id, node });
    } else {
      const node = validateNode(errs, n, prefix, undefined, backends);
      if (node) creates.push(node);
    }
  });
  return { updates, creates };
}
