import { createServer, type Server } from 'node:net';
import { describe, expect, it } from 'vitest';
import type { SnapshotInput } from '../../../dataplane/config/validate.js';
import type { ProxyEngine } from '../../../dataplane/engine.js';
import { loopback, startTcpBackend } from '../../helpers/backends.js';
import { cleanup, newEngine } from './engine-harness.js';
import { config, freePort, node, nodebalancer, snapshot } from './snapshot.js';
import { greeting, readLine, tcpConnect } from './clients.js';

/**
 * Incremental snapshots against a real engine with real sockets (docs/dataplane.md,
 * "Incremental snapshots"): a change touches only the listeners of the NodeBalancers it names,
 * and a rejected one leaves everything as it was.
 */
type NbIn = NonNullable<SnapshotInput['nodebalancers']>[number];

function delta(version: number, baseVersion: number, nbs: NbIn[], removed: number[] = []): SnapshotInput {
  return { version, baseVersion, incremental: true, nonce: '', nodebalancers: nbs, removedNodebalancers: removed };
}

function runtimeOf(engine: ProxyEngine, configId: number) {
  return [...engine.configs()].find((rt) => rt.spec.id === configId);
}

async function backends(...names: string[]) {
  const out = [];
  for (const n of names) {
    const b = await startTcpBackend(n);
    cleanup.push(() => b.close());
    out.push(b);
  }
  return out;
}

describe('incremental snapshots', () => {
  it('a change touches only its NodeBalancer: the others keep their runtimes, listeners and open connections', async () => {
    const [a, b] = await backends('a', 'b');
    const ip = loopback();
    const [p1, p2, p3] = [await freePort(ip), await freePort(ip), await freePort(ip)];
    const { engine } = newEngine();
    const c1 = config(p1, [node(a.address)]);
    const c2 = config(p2, [node(a.address)]);
    const nb1 = nodebalancer(ip, [c1]);
    const nb2 = nodebalancer(ip, [c2]);
    await engine.apply(snapshot(1, [nb1, nb2]));
    const open = await tcpConnect(ip, p2);
    expect(await readLine(open)).toBe('a');
    const untouched = runtimeOf(engine, c2.id as number)!;
    const untouchedSpec = untouched.spec;

    // nb1 moves to backend b and gains a listener; nb2 is not in the delta.
    const c3 = config(p3, [node(b.address)]);
    await engine.apply(delta(2, 1, [{ ...nb1, configs: [{ ...c1, nodes: [node(b.address)] }, c3] }]));
    expect(engine.version()).toBe(2);
    expect(await greeting(ip, p1)).toBe('b');
    expect(await greeting(ip, p3)).toBe('b');
    // The untouched config was not even looked at: same runtime, same spec object.
    expect(runtimeOf(engine, c2.id as number)).toBe(untouched);
    expect(untouched.spec).toBe(untouchedSpec);
    open.write('still here\n');
    expect(await readLine(open)).toBe('still here');
    expect(await greeting(ip, p2)).toBe('a');

    // Removing nb1 closes its two listeners and nothing else.
    await engine.apply(delta(3, 2, [], [nb1.id as number]));
    await expect(tcpConnect(ip, p1)).rejects.toThrow(/ECONNREFUSED/);
    await expect(tcpConnect(ip, p3)).rejects.toThrow(/ECONNREFUSED/);
    expect(runtimeOf(engine, c2.id as number)).toBe(untouched);
    open.write('and here\n');
    expect(await readLine(open)).toBe('and here');
    expect(await greeting(ip, p2)).toBe('a');
    expect([...engine.configs()].map((rt) => rt.spec.id)).toEqual([c2.id]);
    open.destroy();
  });

  it('a rejected delta changes nothing: the previous state keeps serving at its version', async () => {
    const [a, b] = await backends('a', 'b');
    const ip = loopback();
    const [p1, p2, taken] = [await freePort(ip), await freePort(ip), await freePort(ip)];
    // Another process's socket on `taken`: binding it fails with EADDRINUSE.
    const squatter: Server = createServer();
    await new Promise<void>((r) => squatter.listen(taken, ip, () => r()));
    cleanup.push(() => new Promise((r) => squatter.close(() => r(undefined))));
    const { engine } = newEngine();
    const c1 = config(p1, [node(a.address)]);
    const nb1 = nodebalancer(ip, [c1]);
    await engine.apply(snapshot(5, [nb1]));

    // Valid change to nb1 (to b) together with a new NodeBalancer whose port is taken.
    const moved = { ...nb1, configs: [{ ...c1, nodes: [node(b.address)] }] };
    const blocked = nodebalancer(ip, [config(taken, [node(b.address)])]);
    await expect(engine.apply(delta(6, 5, [moved, blocked]))).rejects.toThrow(/cannot listen on .*EADDRINUSE/);
    expect(engine.version()).toBe(5);
    expect(await greeting(ip, p1)).toBe('a');

    // Invalid content in one NodeBalancer: the valid change beside it is not applied either.
    const broken = nodebalancer(ip, [config(p2, [node('not-an-address')])]);
    await expect(engine.apply(delta(7, 5, [moved, broken]))).rejects.toThrow(/nodebalancers\[1\]\.configs\[0\]\.nodes\[0\]\.address/);
    expect(engine.version()).toBe(5);
    expect(await greeting(ip, p1)).toBe('a');
    await expect(tcpConnect(ip, p2)).rejects.toThrow(/ECONNREFUSED/);

    // A delta on top of a version this engine does not serve is refused.
    await expect(engine.apply(delta(8, 4, [moved]))).rejects.toThrow(/applies on version 4, but version 5 is served/);
    // A listen key held by a NodeBalancer the delta does not replace is refused.
    const clash = nodebalancer(ip, [config(p1, [node(b.address)])]);
    await expect(engine.apply(delta(8, 5, [clash]))).rejects.toThrow(new RegExp(`${ip}:${p1} is already used by NodeBalancer ${nb1.id}`));
    expect(engine.version()).toBe(5);
    expect(await greeting(ip, p1)).toBe('a');

    // The same change, alone, applies.
    await engine.apply(delta(9, 5, [moved]));
    expect(engine.version()).toBe(9);
    expect(await greeting(ip, p1)).toBe('b');
  });

  it('a whole snapshot after deltas replaces everything (what a reconnect sends)', async () => {
    const [a, b] = await backends('a', 'b');
    const ip = loopback();
    const [p1, p2] = [await freePort(ip), await freePort(ip)];
    const { engine } = newEngine();
    const nb1 = nodebalancer(ip, [config(p1, [node(a.address)])]);
    await engine.apply(snapshot(1, [nb1]));
    const nb2 = nodebalancer(ip, [config(p2, [node(a.address)])]);
    await engine.apply(delta(2, 1, [nb2]));
    expect(await greeting(ip, p2)).toBe('a');
    // The full state no longer has nb1, and nb2 moved to b.
    await engine.apply(snapshot(3, [{ ...nb2, configs: [{ ...nb2.configs![0]!, nodes: [node(b.address)] }] }]));
    await expect(tcpConnect(ip, p1)).rejects.toThrow(/ECONNREFUSED/);
    expect(await greeting(ip, p2)).toBe('b');
    expect(engine.version()).toBe(3);
  });
});
