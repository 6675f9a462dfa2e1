import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import { validateSnapshot } from '../../../dataplane/config/validate.js';
import { ConfigRuntime } from '../../../dataplane/runtime/config-runtime.js';
import { TicketKeys } from '../../../dataplane/runtime/ticket-keys.js';
import { ConnThrottle } from '../../../dataplane/throttle/conn-throttle.js';
import { makeCa, makeCert } from '../../helpers/certs.js';

describe('TicketKeys (the data plane\'s TLS ticket secret)', () => {
  it('derives the same 48 bytes from the same secret in every process, and different bytes per config', () => {
    const a = new TicketKeys();
    const b = new TicketKeys(a.secret());
    expect(a.forConfig(1)).toHaveLength(48);
    expect(b.forConfig(1).equals(a.forConfig(1))).toBe(true);
    expect(a.forConfig(2).equals(a.forConfig(1))).toBe(false);
    expect(new TicketKeys().forConfig(1).equals(a.forConfig(1))).toBe(false);
  });

  it('rotate() draws a new secret and tells subscribers; set() takes a peer\'s and refuses a wrong length', () => {
    const k = new TicketKeys();
    const old = k.forConfig(5);
    let told = 0;
    const stop = k.onChange(() => told++);
    k.rotate();
    expect(told).toBe(1);
    expect(k.forConfig(5).equals(old)).toBe(false);
    const peer = new TicketKeys();
    k.set(peer.secret());
    expect(told).toBe(2);
    expect(k.forConfig(5).equals(peer.forConfig(5))).toBe(true);
    expect(() => k.set(Buffer.alloc(16))).toThrow(/32 bytes/);
    stop();
    k.rotate();
    expect(told).toBe(2);
  });

  it('an https runtime\'s server carries the derived keys through rekey() and a certificate change', () => {
    const ca = makeCa();
    const c1 = makeCert(ca, 'one.test');
    const c2 = makeCert(ca, 'two.test');
    const spec = (cert: { cert: string; key: string }) => validateSnapshot({ version: 1, nodebalancers: [{ id: 7, ipv4: '127.0.0.1', configs: [{
      id: 3, port: 443, protocol: 'https', sslCert: cert.cert, sslKey: cert.key, nodes: [{ id: 1, address: '127.0.0.1:1' }],
    }] }] }).nodebalancers[0].configs[0];
    const clock = new ManualClock();
    const keys = new TicketKeys();
    const rt = new ConfigRuntime(spec(c1), new ConnThrottle(0, clock), clock, silentLogger(), () => undefined, null, keys);
    expect(rt.tls!.getTicketKeys().equals(keys.forConfig(3))).toBe(true);
    keys.rotate();
    rt.rekey();
    expect(rt.tls!.getTicketKeys().equals(keys.forConfig(3))).toBe(true);
    // A new certificate builds a new secure context: the current keys go into it, not the first ones.
    rt.update(spec(c2));
    expect(rt.tls!.getTicketKeys().equals(keys.forConfig(3))).toBe(true);
    rt.retire();
  });
});
