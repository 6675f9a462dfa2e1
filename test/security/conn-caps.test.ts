import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loopback, waitFor, type TcpBackend } from '../helpers/backends.js';
import { ask, echoBackend } from '../helpers/tcp.js';
import { config, node, nodebalancer, snapshot } from '../integration/dataplane/snapshot.js';
import { startDataplaneProcess, type DataplaneProcess } from './dataplane-process.js';

/**
 * One client exhausts a data plane (docs/security/traffic.md): it opens 200 idle connections to
 * one NodeBalancer from one address. The data plane keeps the per-client cap (100 by default)
 * and refuses the rest at once, counted by reason; another client is served meanwhile; the idle
 * ones are closed after the tcp idle timeout (shortened to 3 s here), while a session that keeps
 * talking is not.
 */
describe('connection caps and idle timeouts', () => {
  let dp: DataplaneProcess;
  let backend: TcpBackend;
  const nbIp = loopback();
  const port = 7301;
  const attacker = loopback();
  const other = loopback();
  const open: Socket[] = [];

  beforeAll(async () => {
    backend = await echoBackend(loopback(), 'b');
    dp = await startDataplaneProcess(
      snapshot(1, [nodebalancer(nbIp, [config(port, [node(`${backend.ip}:${backend.port}`)])])]),
      { flags: ['--tcp-idle-timeout', '3'] },
    );
    await waitFor(() => ask(nbIp, port, 'x', { localAddress: other }).then(() => true, () => false), 20_000, 'listener up');
  });
  afterAll(async () => {
    for (const s of open) s.destroy();
    await dp?.stop();
    await backend?.close();
  });

  it('cuts 200 idle connections from one address back to the cap, serves another address, and closes idle sessions', async () => {
    const closedEarly: number[] = [];
    const connected = await Promise.all(Array.from({ length: 200 }, (_, i) => new Promise<boolean>((resolve) => {
      const s = connect({ host: nbIp, port, localAddress: attacker });
      open.push(s);
      s.on('error', () => undefined);
      s.once('connect', () => resolve(true));
      s.once('close', () => {
        closedEarly.push(i);
        resolve(false);
      });
    })));
    expect(connected.length).toBe(200);
    // The refused ones are reset at once; the admitted ones stay open and idle.
    await waitFor(async () => (await dp.metric('fulcrum_dataplane_connections_refused_total', 'reason="client_cap"')) === 100, 10_000, '100 refusals counted');
    await waitFor(() => closedEarly.length === 100, 5_000, 'refused connections closed');
    expect(await dp.metric('fulcrum_dataplane_open_connections')).toBe(100);
    const held = open.filter((s) => !s.destroyed);
    expect(held.length).toBe(100);

    // Another client of the same NodeBalancer is served while the attacker sits at its cap.
    expect(await ask(nbIp, port, 'hello', { localAddress: other })).toBe('b:hello');
    // The attacker gets nothing more: its connection is cut by the cap (counted as such), not
    // refused by the kernel or left to time out, which a listener gone or a wrong address would give.
    await expect(ask(nbIp, port, 'more', { localAddress: attacker, timeoutMs: 2000 })).rejects.toThrow(/ECONNRESET|closed without an answer/);
    expect(await dp.metric('fulcrum_dataplane_connections_refused_total', 'reason="client_cap"')).toBe(101);

    // A session that keeps talking outlives the idle timeout; the idle ones do not.
    const talker = connect({ host: nbIp, port, localAddress: other });
    open.push(talker);
    let answers = 0;
    talker.on('data', () => answers++);
    const tick = setInterval(() => talker.write('ping'), 500);
    const started = Date.now();
    await waitFor(() => held.every((s) => s.destroyed || s.readyState === 'closed'), 15_000, 'idle sessions closed by the data plane');
    const tookMs = Date.now() - started;
    expect(tookMs).toBeGreaterThan(1000);
    await new Promise((r) => setTimeout(r, 1500));
    clearInterval(tick);
    expect(talker.destroyed).toBe(false);
    expect(answers).toBeGreaterThan(5);
    talker.destroy();
    await waitFor(async () => (await dp.metric('fulcrum_dataplane_open_connections')) === 0, 10_000, 'all closed');
    // The attacker's address is welcome again once its connections are gone.
    expect(await ask(nbIp, port, 'again', { localAddress: attacker })).toBe('b:again');
  });
});
