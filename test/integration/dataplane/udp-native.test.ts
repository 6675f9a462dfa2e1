import { describe, expect, it } from 'vitest';
import { udpRelay, udpRelayError } from '../../../dataplane/native/udp-relay.js';
import { startUdpEcho } from '../../helpers/udp.js';
import { snapshot } from './snapshot.js';
import { startUdpTrio } from './udp-harness.js';

/**
 * The native datagram path (dataplane/native/udp_relay.c, docs/dataplane.md "UDP: the native
 * datagram path"): it is the path in use on this machine (CI cannot fall back to node:dgram
 * without failing here), established flows are relayed without JavaScript, their bytes still
 * reach the counters, and a policy change (the session's node leaves) sends them back through it.
 */

const relayed = () => udpRelay!.relayed();

describe('udp native datagram path', () => {
  it('is built and loads in the Node the tests run on', () => {
    expect(udpRelayError).toBeNull();
    expect(udpRelay).not.toBeNull();
  });

  it('relays an established flow in C both ways, and counts its bytes', async () => {
    const { flow, engine } = await startUdpTrio({ algorithm: 'roundrobin' });
    const f = flow();
    const name = await f.who('first');
    expect(name).not.toBeNull();
    engine.drainCounters();
    const before = relayed();
    let sent = 0;
    let answered = 0;
    for (let i = 0; i < 40; i++) {
      const msg = `m-${i}`;
      const a = await f.ask(msg);
      expect(a).toBe(`${name}:${msg}`);
      sent += msg.length;
      answered += a!.length;
    }
    // The first datagrams go through JavaScript (the client proves its address with its second,
    // the node's health is seen on a reply); after that every datagram stays in C.
    expect(relayed() - before).toBeGreaterThanOrEqual(2 * 40 - 6);
    const deltas = engine.drainCounters();
    expect(deltas.reduce((a, d) => a + d.bytesIn, 0)).toBe(sent);
    expect(deltas.reduce((a, d) => a + d.bytesOut, 0)).toBe(answered);
  });

  it('an established flow whose node leaves the config moves on its next datagram', async () => {
    const { flow, engine, nb, cfg, nodes } = await startUdpTrio({ algorithm: 'roundrobin' });
    const f = flow();
    const first = await f.who();
    for (let i = 0; i < 5; i++) expect(await f.who()).toBe(first);
    const before = relayed();
    expect(await f.who()).toBe(first);
    expect(relayed()).toBeGreaterThan(before);
    const keep = nodes.filter((_, i) => ['a', 'b', 'c'][i] !== first);
    await engine.apply(snapshot(2, [{ ...nb, configs: [{ ...cfg, nodes: keep }] }]));
    const after = await f.who();
    expect(after).not.toBeNull();
    expect(after).not.toBe(first);
    for (let i = 0; i < 5; i++) expect(await f.who()).toBe(after);
  });

  it('a session whose node was not listening for a moment (ICMP port unreachable) hears it again once it is back', async () => {
    // The kernel reports the ICMP error as an error on the connected session socket, which libuv's
    // poll answers by stopping the poll: the relay must clear the error and poll again.
    const { flow, backends } = await startUdpTrio({ algorithm: 'roundrobin' });
    const f = flow();
    const first = await f.who();
    for (let i = 0; i < 4; i++) expect(await f.who()).toBe(first);
    const i = ['a', 'b', 'c'].indexOf(first!);
    const b = backends[i]!;
    await b.close();
    expect(await f.who('into the void', 500)).toBeNull();
    const back = await startUdpEcho(b.name, b.ip, b.port);
    backends.push(back);
    expect(await f.who('again', 5000)).toBe(first);
    for (let n = 0; n < 3; n++) expect(await f.who()).toBe(first);
    await back.close();
  });

  it('udpNative false serves through node:dgram: nothing is relayed in C', async () => {
    const { flow } = await startUdpTrio({ algorithm: 'roundrobin' }, { udpNative: false });
    const f = flow();
    const name = await f.who();
    expect(name).not.toBeNull();
    const before = relayed();
    for (let i = 0; i < 10; i++) expect(await f.who()).toBe(name);
    expect(relayed()).toBe(before);
  });
});
