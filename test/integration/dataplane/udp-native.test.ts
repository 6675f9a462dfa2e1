import { createSocket } from 'node:dgram';
import { describe, expect, it } from 'vitest';
import { nativeHandle } from '../../../dataplane/listeners/udp-fast.js';
import { udpRelay, udpRelayError } from '../../../dataplane/native/udp-relay.js';
import { waitFor } from '../../helpers/backends.js';
import { startUdpEcho } from '../../helpers/udp.js';
import { cleanup, newEngine } from './engine-harness.js';
import { snapshot } from './snapshot.js';
import { startUdpTrio } from './udp-harness.js';

/**
 * The native datagram path (dataplane/native/udp_relay.c, docs/dataplane.md "UDP: the native
 * datagram path"): it is the path in use on this machine (CI cannot fall back to node:dgram
 * without failing here), established flows are relayed without JavaScript, their bytes still
 * reach the counters, and a policy change (the session's node leaves) sends them back through it.
 * What it drops where node:dgram would have queued reaches the metrics.
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

  it('counts what the relay drops in fulcrum_dataplane_udp_relay_dropped_total', async () => {
    // A send the kernel refuses, made certain: an IPv6 node's largest reply (65,527 bytes) is more
    // than UDP over IPv4 can carry back to the client (65,507): sendmmsg says EMSGSIZE, and the
    // relay drops it, as it drops a send that finds the buffer full (EAGAIN).
    const addon = udpRelay!;
    const { registry } = newEngine();
    const node = createSocket('udp6');
    node.on('message', (msg, from) => node.send(msg.toString() === 'big' ? Buffer.alloc(65527, 1) : msg, from.port, from.address));
    await new Promise<void>((r) => node.bind(0, '::1', () => r()));
    cleanup.push(() => node.close());
    const listening = createSocket('udp4');
    await new Promise<void>((r) => listening.bind(0, '127.0.0.1', () => r()));
    cleanup.push(() => listening.close());
    const client = createSocket('udp4');
    const heard: string[] = [];
    client.on('message', (m) => heard.push(m.toString()));
    await new Promise<void>((r) => client.bind(0, '127.0.0.1', () => r()));
    cleanup.push(() => client.close());
    const handle = nativeHandle(listening) as unknown as { fd: number; recvStop(): number };
    const r = addon.create(handle.fd, new Int32Array(1), () => undefined, () => undefined, () => undefined);
    handle.recvStop();
    cleanup.push(() => addon.destroy(r));
    const id = addon.open(r, '127.0.0.1', client.address().port, '::1', node.address().port, true);
    expect(id).toBeGreaterThanOrEqual(0);
    addon.establish(r, id, 0);
    const send = (m: string) => client.send(m, listening.address().port, '127.0.0.1');
    send('small');
    await waitFor(() => heard.includes('small'), 30_000, 'a reply relayed');
    const [before] = addon.drops();
    send('big');
    await waitFor(() => addon.stats(r)[1] === 1, 30_000, 'the reply too large for IPv4 dropped');
    expect(addon.drops()[0] - before).toBe(1);
    const text = await registry.metrics();
    expect(text).toMatch(new RegExp(`fulcrum_dataplane_udp_relay_dropped_total\\{reason="send_failed"[^}]*\\} ${addon.drops()[0]}\n`));
    expect(text).toMatch(/fulcrum_dataplane_udp_relay_dropped_total\{reason="truncated"[^}]*\} \d+\n/);
    // The relay goes on: the next reply is relayed.
    send('after');
    await waitFor(() => heard.includes('after'), 30_000, 'the next reply relayed');
  });
});
