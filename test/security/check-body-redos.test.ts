import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../helpers/api-harness.js';
import { loopback, waitFor, type TcpBackend } from '../helpers/backends.js';
import { ask, echoBackend } from '../helpers/tcp.js';
import { config, node, nodebalancer, snapshot } from '../integration/dataplane/snapshot.js';
import { startDataplaneProcess, type DataplaneProcess } from './dataplane-process.js';

const CATASTROPHIC = '^(a+)+$';
const BENIGN_BODY = 'aaaa';
// Exponential in the number of a's for a backtracking engine. 26 (the measured attack) takes
// seconds per match; with 23 a fast moment of the machine finished some matches inside the
// 100 ms limit, so no match was cut and the timeout counter this test reads stayed at 0.
const EVIL_BODY = `${'a'.repeat(26)}b`;

function p99(samples: number[]): number {
  const s = [...samples].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(s.length * 0.99) - 1)];
}

/**
 * One tenant's health-check regex stalls every NodeBalancer (docs/security/traffic.md). The API
 * refuses the regex; a data plane that has it anyway (a snapshot saved by an earlier version,
 * loaded here straight from its state folder at start) matches bodies on a worker thread with a
 * time limit, so another NodeBalancer's latency stays within 2x of its baseline, measured in
 * the same test by switching the check's backends between a harmless and a catastrophic body.
 */
describe('check_body ReDoS', () => {
  let api: ApiHarness;
  let dp: DataplaneProcess;
  let good: TcpBackend;
  const checkServers: Server[] = [];
  let body = BENIGN_BODY;
  const goodIp = loopback();
  const evilIp = loopback();
  const client = loopback();
  const port = 7303;

  beforeAll(async () => {
    good = await echoBackend(loopback(), 'g');
    const evilNodes: string[] = [];
    for (let i = 0; i < 8; i++) {
      const s = createServer((_req, res) => res.end(body));
      const ip = loopback();
      await new Promise<void>((r) => s.listen(0, ip, () => r()));
      checkServers.push(s);
      evilNodes.push(`${ip}:${(s.address() as { port: number }).port}`);
    }
    dp = await startDataplaneProcess(snapshot(1, [
      nodebalancer(goodIp, [config(port, [node(`${good.ip}:${good.port}`)])]),
      nodebalancer(evilIp, [config(port, evilNodes.map((a) => node(a)), {
        protocol: 'http', check: 'http_body', checkPath: '/', checkBody: CATASTROPHIC, checkInterval: 2, checkTimeout: 1, checkAttempts: 1,
      })]),
    ]));
    await waitFor(() => ask(goodIp, port, 'x', { localAddress: client }).then(() => true, () => false), 20_000, 'listener up');
  });
  afterAll(async () => {
    await dp?.stop();
    await good?.close();
    for (const s of checkServers) s.close();
    await api?.close();
  });

  it('the API refuses a catastrophic check_body with a 400 naming check_body', async () => {
    api = await startApi();
    const nb = await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east' } });
    expect(nb.status).toBe(200);
    for (const bad of [CATASTROPHIC, '(a|aa)*$', '(x+)\\1']) {
      const res = await api.req('POST', `/v4/nodebalancers/${nb.body.id}/configs`, {
        body: { port: 80, protocol: 'http', check: 'http_body', check_path: '/', check_body: bad },
      });
      expect(res.status, bad).toBe(400);
      expect(res.body.errors.map((e: { field?: string }) => e.field), bad).toContain('check_body');
    }
    const ok = await api.req('POST', `/v4/nodebalancers/${nb.body.id}/configs`, {
      body: { port: 80, protocol: 'http', check: 'http_body', check_path: '/', check_body: '"status":\\s*"ok"' },
    });
    expect(ok.status).toBe(200);
  });

  it("a catastrophic regex in the data plane's saved config leaves another NodeBalancer's p99 within 2x", async () => {
    /** Eight clients doing back-to-back connect + request + answer on the good NodeBalancer for `ms`. */
    async function measure(ms: number): Promise<number[]> {
      const out: number[] = [];
      const end = Date.now() + ms;
      await Promise.all(Array.from({ length: 8 }, async () => {
        while (Date.now() < end) {
          const t = process.hrtime.bigint();
          expect(await ask(goodIp, port, 'p', { localAddress: client, timeoutMs: 10_000 })).toBe('g:p');
          out.push(Number(process.hrtime.bigint() - t) / 1e6);
        }
      }));
      return out;
    }
    const baseline: number[] = [];
    const attack: number[] = [];
    // Alternating rounds, so a change in the machine's load hits both alike.
    for (let round = 0; round < 2; round++) {
      body = BENIGN_BODY;
      await new Promise((r) => setTimeout(r, 500));
      baseline.push(...(await measure(2500)));
      body = EVIL_BODY;
      attack.push(...(await measure(5000)));
    }
    // A floor of 10 ms keeps scheduler noise on a shared machine from counting as a regression;
    // the stall this guards against is hundreds of milliseconds per match.
    const base = Math.max(p99(baseline), 10);
    console.log(`check-body-redos: baseline p99 ${p99(baseline).toFixed(1)} ms (${baseline.length}), attack p99 ${p99(attack).toFixed(1)} ms (${attack.length})`);
    expect(p99(attack), `baseline p99 ${p99(baseline).toFixed(1)} ms, attack p99 ${p99(attack).toFixed(1)} ms`).toBeLessThanOrEqual(2 * base);
    // The checks did run into the regex: matches were stopped at the time limit and the nodes
    // whose body cannot be matched in time are DOWN.
    expect(await dp.metric('fulcrum_dataplane_check_body_timeouts_total')).toBeGreaterThan(0);
    await waitFor(async () => ((await dp.metrics()).match(/^fulcrum_dataplane_node_up\{.*\} 0$/gm) ?? []).length === 8, 10_000, 'the eight checked nodes DOWN');
  });
});
