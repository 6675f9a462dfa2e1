import { X509Certificate, createPrivateKey } from 'node:crypto';
import { isIPv4 } from 'node:net';
import { ErrorCollector } from '../../../lib/errors.js';
import type { NewConfig, NewNode, NbConfig, NbNode } from './model.js';
import { configDefaults } from './model.js';

/**
 * Validation of NodeBalancer, Config and Node request bodies. Rules are data (one small spec per
 * field) plus the cross-field rules; every violation is collected with its field path
 * (`configs[0].nodes[1].address`) so a client sees them all in one 400.
 */

type Body = Record<string, unknown>;

const LABEL_NB = /^[a-zA-Z0-9_-]+$/;
const LABEL_NODE = /^[a-zA-Z0-9_.-]+$/;
const CHECK_PATH = /^[a-zA-Z0-9/\-%?&=.]*$/;

export const enums = {
  protocol: ['http', 'https', 'tcp'],
  algorithm: ['roundrobin', 'leastconn', 'source'],
  stickiness: ['none', 'table', 'http_cookie'],
  check: ['none', 'connection', 'http', 'http_body'],
  proxy_protocol: ['none', 'v1', 'v2'],
  cipher_suite: ['recommended', 'legacy'],
  mode: ['accept', 'reject', 'drain', 'backup'],
} as const;

function path(prefix: string, f: string): string {
  return prefix ? `${prefix}.${f}` : f;
}

function int(errs: ErrorCollector, b: Body, f: string, prefix: string, min: number, max: number): number | undefined {
  const v = b[f];
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v)) {
    errs.add(path(prefix, f), `${f} must be an integer`);
    return undefined;
  }
  if (v < min || v > max) {
    errs.add(path(prefix, f), `${f} must be between ${min} and ${max}`);
    return undefined;
  }
  return v;
}

function oneOf<T extends string>(errs: ErrorCollector, b: Body, f: keyof typeof enums, prefix: string): T | undefined {
  const v = b[f];
  if (v === undefined) return undefined;
  const allowed = enums[f] as readonly string[];
  if (typeof v !== 'string' || !allowed.includes(v)) {
    errs.add(path(prefix, f), `${f} must be one of ${allowed.join(', ')}`);
    return undefined;
  }
  return v as T;
}

function str(errs: ErrorCollector, b: Body, f: string, prefix: string, max = 65536): string | undefined {
  const v = b[f];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') {
    errs.add(path(prefix, f), `${f} must be a string`);
    return undefined;
  }
  if (v.length > max) {
    errs.add(path(prefix, f), `${f} must be ${max} characters or fewer`);
    return undefined;
  }
  return v;
}

export function validateNbLabel(errs: ErrorCollector, v: unknown, field = 'label'): string | undefined {
  if (typeof v !== 'string') {
    errs.add(field, 'Label must be a string');
    return undefined;
  }
  if (v.length < 3 || v.length > 32) errs.add(field, 'Label must be between 3 and 32 characters.');
  else if (!LABEL_NB.test(v)) errs.add(field, "Label can't contain special characters or spaces.");
  else return v;
  return undefined;
}

export function validateTags(errs: ErrorCollector, v: unknown): string[] | undefined {
  if (v === undefined || v === null) return v === null ? [] : undefined;
  if (!Array.isArray(v)) {
    errs.add('tags', 'tags must be an array of strings');
    return undefined;
  }
  const out: string[] = [];
  v.forEach((t, i) => {
    if (typeof t !== 'string' || t.length < 3 || t.length > 50) errs.add(`tags[${i}]`, 'Tags must be strings of 3 to 50 characters');
    else out.push(t);
  });
  return [...new Set(out)];
}

export function validateThrottle(errs: ErrorCollector, b: Body): number | undefined {
  return int(errs, b, 'client_conn_throttle', '', 0, 20);
}

/** Address `ip:port` with a dotted IPv4 and a port 1..65535. */
export function validateAddress(errs: ErrorCollector, v: unknown, field: string): string | undefined {
  if (typeof v !== 'string') {
    errs.add(field, 'address must be a string of the form ip:port');
    return undefined;
  }
  const m = /^(\d{1,3}(?:\.\d{1,3}){3}):(\d{1,5})$/.exec(v);
  if (!m || !isIPv4(m[1]!)) {
    errs.add(field, 'Must be a valid IPv4 address followed by :port');
    return undefined;
  }
  const port = Number(m[2]);
  if (port < 1 || port > 65535) {
    errs.add(field, 'Port must be between 1 and 65535.');
    return undefined;
  }
  return v;
}

/**
 * Validates a node body. `base` is the current node on update (partial bodies keep the other
 * fields), undefined on create (label and address required).
 */
export function validateNode(errs: ErrorCollector, b: unknown, prefix: string, base?: NbNode): NewNode | undefined {
  if (b === null || typeof b !== 'object' || Array.isArray(b)) {
    errs.add(prefix || undefined, 'node must be an object');
    return undefined;
  }
  const body = b as Body;
  const before = errs.errors.length;
  let label = base?.label;
  if (body.label !== undefined || !base) {
    if (body.label === undefined) errs.add(path(prefix, 'label'), 'label is required');
    else if (typeof body.label !== 'string') errs.add(path(prefix, 'label'), 'label must be a string');
    else if (body.label.length < 3 || body.label.length > 32) errs.add(path(prefix, 'label'), 'Label should be between 3 and 32 characters.');
    else if (!LABEL_NODE.test(body.label)) errs.add(path(prefix, 'label'), 'Label may only contain letters, numbers, periods, dashes, and underscores.');
    else label = body.label;
  }
  let address = base?.address;
  if (body.address !== undefined || !base) {
    if (body.address === undefined) errs.add(path(prefix, 'address'), 'address is required');
    else address = validateAddress(errs, body.address, path(prefix, 'address'));
  }
  const weight = int(errs, body, 'weight', prefix, 1, 255) ?? base?.weight ?? 50;
  const mode = oneOf<NewNode['mode']>(errs, body, 'mode', prefix) ?? base?.mode ?? 'accept';
  if (errs.errors.length > before) return undefined;
  return { label: label!, address: address!, weight, mode };
}

export interface CertInfo {
  commonname: string;
  fingerprint: string;
}

/** Parses the certificate (first of a chain) and checks that the key matches it. */
export function inspectCertificate(cert: string, key: string): CertInfo | { certError?: string; keyError?: string } {
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(cert);
  } catch {
    return { certError: 'Invalid SSL certificate: it must be a PEM encoded certificate' };
  }
  let pk;
  try {
    pk = createPrivateKey(key);
  } catch {
    return { keyError: 'Invalid SSL key: it must be a PEM encoded private key' };
  }
  if (!x509.checkPrivateKey(pk)) return { keyError: 'SSL key does not match the certificate' };
  const cn = /(?:^|\n)CN=([^\n]*)/.exec(x509.subject)?.[1] ?? '';
  return { commonname: cn, fingerprint: x509.fingerprint };
}

/**
 * Validates a config body into a complete config. `base` is the stored config on update and
 * rebuild (fields left out keep their values); undefined on create (defaults apply).
 * `usedPorts` are the other configs' ports on the same NodeBalancer.
 */
export function validateConfig(errs: ErrorCollector, b: unknown, prefix: string, usedPorts: number[], base?: NbConfig): NewConfig | undefined {
  if (b === null || typeof b !== 'object' || Array.isArray(b)) {
    errs.add(prefix || undefined, 'config must be an object');
    return undefined;
  }
  const body = b as Body;
  const before = errs.errors.length;
  const cur: NewConfig = base ? { ...base } : { ...configDefaults };
  delete (cur as any).id;
  delete (cur as any).nodebalancerId;

  const beforePort = errs.errors.length;
  const port = int(errs, body, 'port', prefix, 1, 65535);
  if (port !== undefined) cur.port = port;
  // An invalid port is reported once; checking the kept (default or stored) port for uniqueness
  // would add a second, misleading error about a port the client never sent.
  if (errs.errors.length === beforePort && usedPorts.includes(cur.port)) errs.add(path(prefix, 'port'), 'Port must be unique.');
  cur.protocol = oneOf(errs, body, 'protocol', prefix) ?? cur.protocol;
  cur.algorithm = oneOf(errs, body, 'algorithm', prefix) ?? cur.algorithm;
  cur.stickiness = oneOf(errs, body, 'stickiness', prefix) ?? cur.stickiness;
  cur.check = oneOf(errs, body, 'check', prefix) ?? cur.check;
  cur.proxyProtocol = oneOf(errs, body, 'proxy_protocol', prefix) ?? cur.proxyProtocol;
  cur.cipherSuite = oneOf(errs, body, 'cipher_suite', prefix) ?? cur.cipherSuite;
  cur.checkInterval = int(errs, body, 'check_interval', prefix, 2, 3600) ?? cur.checkInterval;
  cur.checkTimeout = int(errs, body, 'check_timeout', prefix, 1, 30) ?? cur.checkTimeout;
  cur.checkAttempts = int(errs, body, 'check_attempts', prefix, 1, 30) ?? cur.checkAttempts;
  const checkPath = str(errs, body, 'check_path', prefix, 255);
  if (checkPath !== undefined) {
    if (!CHECK_PATH.test(checkPath)) errs.add(path(prefix, 'check_path'), 'check_path may only contain letters, digits and / - % ? & = .');
    else cur.checkPath = checkPath;
  }
  const checkBody = str(errs, body, 'check_body', prefix, 1024);
  if (checkBody !== undefined) {
    try {
      new RegExp(checkBody);
      cur.checkBody = checkBody;
    } catch {
      errs.add(path(prefix, 'check_body'), 'check_body must be a valid regular expression');
    }
  }
  if (body.check_passive !== undefined) {
    if (typeof body.check_passive !== 'boolean') errs.add(path(prefix, 'check_passive'), 'check_passive must be a boolean');
    else cur.checkPassive = body.check_passive;
  }

  // ssl_cert / ssl_key: "<REDACTED>" (what GET returns) keeps what is stored, so a client may
  // send back a config it read; null or "" clears it (an error later if protocol stays https).
  for (const f of ['ssl_cert', 'ssl_key'] as const) {
    const v = body[f];
    if (v === undefined || v === '<REDACTED>') continue;
    const key = f === 'ssl_cert' ? 'sslCert' : 'sslKey';
    if (v === null || v === '') cur[key] = null;
    else if (typeof v !== 'string') errs.add(path(prefix, f), `${f} must be a PEM string`);
    else if (v.length > 64 * 1024) errs.add(path(prefix, f), `${f} is too long`);
    else cur[key] = v;
  }

  const fieldsOk = errs.errors.length === before;
  if (fieldsOk) {
    if (cur.checkInterval <= cur.checkTimeout) {
      errs.add(path(prefix, 'check_interval'), 'check_interval must be greater than check_timeout');
    }
    if ((cur.check === 'http' || cur.check === 'http_body') && !cur.checkPath) {
      errs.add(path(prefix, 'check_path'), 'An HTTP path is required.');
    }
    if (cur.check === 'http_body' && !cur.checkBody) errs.add(path(prefix, 'check_body'), 'An HTTP body regex is required.');
    if (cur.proxyProtocol !== 'none' && cur.protocol !== 'tcp') {
      errs.add(path(prefix, 'proxy_protocol'), 'proxy_protocol v1 and v2 require protocol tcp');
    }
    if (cur.stickiness === 'http_cookie' && cur.protocol === 'tcp') {
      errs.add(path(prefix, 'stickiness'), 'http_cookie stickiness requires protocol http or https');
    }
    if (cur.protocol === 'https') {
      if (!cur.sslCert) errs.add(path(prefix, 'ssl_cert'), 'SSL certificate is required when using HTTPS.');
      if (!cur.sslKey) errs.add(path(prefix, 'ssl_key'), 'SSL key is required when using HTTPS.');
      if (cur.sslCert && cur.sslKey) {
        const info = inspectCertificate(cur.sslCert, cur.sslKey);
        if ('commonname' in info) {
          cur.sslCommonname = info.commonname;
          cur.sslFingerprint = info.fingerprint;
        } else {
          if (info.certError) errs.add(path(prefix, 'ssl_cert'), info.certError);
          if (info.keyError) errs.add(path(prefix, 'ssl_key'), info.keyError);
        }
      }
    } else {
      const sentCert = body.ssl_cert !== undefined && body.ssl_cert !== null && body.ssl_cert !== '' && body.ssl_cert !== '<REDACTED>';
      const sentKey = body.ssl_key !== undefined && body.ssl_key !== null && body.ssl_key !== '' && body.ssl_key !== '<REDACTED>';
      if (sentCert) errs.add(path(prefix, 'ssl_cert'), `ssl_cert is only allowed with protocol https`);
      if (sentKey) errs.add(path(prefix, 'ssl_key'), `ssl_key is only allowed with protocol https`);
      // Switching away from https drops the stored certificate.
      cur.sslCert = null;
      cur.sslKey = null;
      cur.sslCommonname = '';
      cur.sslFingerprint = '';
    }
  }
  if (errs.errors.length > before) return undefined;
  return cur;
}
