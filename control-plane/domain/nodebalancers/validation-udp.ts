import type { ErrorCollector } from '../../../lib/errors.js';
import type { Body } from '../validation/fields.js';
import type { NbConfig, NewConfig } from './model.js';
import { nodeBalancerReasons as R } from './reasons.js';

/**
 * Which algorithm, stickiness and cipher_suite values each protocol family takes, as today's
 * clients type them (docs/compatibility.md "UDP configs"): udp has its own stickiness values and
 * `ring_hash`, has no `source`, no TLS and no PROXY protocol.
 */
const udpOnly = { algorithm: ['ring_hash'], stickiness: ['session', 'source_ip'] } as const;
const streamOnly = { algorithm: ['source'], stickiness: ['table', 'http_cookie'] } as const;
const defaults = {
  udp: { algorithm: 'roundrobin', stickiness: 'session', cipherSuite: 'none' },
  stream: { algorithm: 'roundrobin', stickiness: 'none', cipherSuite: 'recommended' },
} as const;

const wireOf = { algorithm: 'algorithm', stickiness: 'stickiness' } as const;

/**
 * The rules that depend on the protocol family, on a config whose fields are each valid. A value
 * the client sent that the protocol does not take is a 400 naming the field; a stored or default
 * value the new protocol does not take (a tcp config switched to udp) becomes that protocol's
 * default, so switching needs no other field.
 */
export function protocolRules(errs: ErrorCollector, cur: NewConfig, body: Body, base: NbConfig | undefined, at: (f: string) => string): void {
  const udp = cur.protocol === 'udp';
  const forbidden = udp ? streamOnly : udpOnly;
  const dflt = udp ? defaults.udp : defaults.stream;
  for (const key of ['algorithm', 'stickiness'] as const) {
    if (!(forbidden[key] as readonly string[]).includes(cur[key])) continue;
    if (body[wireOf[key]] !== undefined) errs.add(at(wireOf[key]), udp ? R.notUdp(key, cur[key]) : R.udpOnly(key, cur[key]));
    else (cur as Record<string, unknown>)[key] = dflt[key];
  }
  // A new udp config is sticky per session unless the client says otherwise.
  if (udp && base === undefined && body.stickiness === undefined) cur.stickiness = 'session';
  if (udp) {
    if (body.cipher_suite !== undefined && cur.cipherSuite !== 'none') errs.add(at('cipher_suite'), R.udpCipherSuite);
    cur.cipherSuite = 'none';
    if (body.proxy_protocol !== undefined && cur.proxyProtocol !== 'none') errs.add(at('proxy_protocol'), R.udpProxyProtocol);
    cur.proxyProtocol = 'none';
    if (body.check_passive === true) errs.add(at('check_passive'), R.udpCheckPassive);
    cur.checkPassive = false;
  } else if (cur.cipherSuite === 'none') {
    if (body.cipher_suite !== undefined) errs.add(at('cipher_suite'), R.cipherNoneNeedsUdp);
    cur.cipherSuite = 'recommended';
  }
  const timeout = body.udp_session_timeout;
  if (timeout !== undefined && timeout !== null && timeout !== cur.udpSessionTimeout) errs.add(at('udp_session_timeout'), R.udpSessionTimeout);
}
