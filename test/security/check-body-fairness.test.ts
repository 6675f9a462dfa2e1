import { createServer, type RequestListener, type Server, type ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loopback, waitFor } from '../helpers/backends.js';
import { freePort } from '../helpers/tcp.js';
import { config, node, nodebalancer, snapshot } from '../integration/dataplane/snapshot.js';
import { startDataplaneProcess, type DataplaneProcess } from './dataplane-process.js';

// Polynomial, not exponential: the API accepts these (docs/security/traffic.md). Against a body
// of spaces, which holds neither letter, V8 tries every start and every split: about 30 ms per
// match on 2,500 bytes on an idle machine, under the 100 ms limit that quarantined a pattern.
// Three patterns, since the old matcher quarantined per pattern.
const SLOW_PATTERNS = ['.*a.*b', '.*c.*d', '.*e.*f'];
const SLOW_BODY = ' '.repeat(2500);
const SLOW_NODES = 40;
/** Until the attack starts, the slow tenant's backends answer at once with a short body. */
let attack = false;

/**
 * Answers the check with `SLOW_BODY`, trickled in 10 pieces over 300 ms (the old probe matched
 * every piece). With 120 such matches a second the worker cannot keep up: matches waiting behind
 * others are still waiting when their probe times out (2 s).
 */
function trickle(_req: unknown, res: ServerResponse): void {
  res.writeHead(200, { 'content-type': 'text/plain' });
  if (!attack) return void res.end('x');
  let i = 0;
  const piece = SLOW_BODY.length / 10;
  const next = (): void => {
    if (res.destroyed) return;
    if (i === 10) return void res.end();
    res.write(SLOW_BODY.slice(i * piece, ++i * piece));
    setTimeout(next, 30);
  };
  next();
}

async function listen(handler: RequestListener, ip: string): Promise<Server> {
  const s = createServer(handler);
  await new Promise<void>((r) => s.listen(0, ip, () => r()));
  return s;
}

const address = (s: Server, ip: string): string => `${ip}:${(s.address() as { port: number }).port}`;

/**
 * One tenant's check_body starved every other tenant's checks
 * (docs/security/traffic.md): one FIFO of matches for all configs, matches re-run on every chunk,
 * the matches of timed-out probes still run, and only one match over 100 ms quarantined a
 * pattern. Here a tenant has three NodeBalancers of 40 nodes each whose pattern takes tens of ms
 * per match; another tenant's NodeBalancer checks two nodes with a plain pattern every second
 * (2 s timeout, 3 attempts). From the attack's start the other tenant's nodes must stay UP and go DOWN only
 * when their backend really stops, the slow configs must be quarantined, and matches of probes
 * that timed out must be dropped unrun.
 */
describe('check_body fairness', () => {
  let dp: DataplaneProcess;
  const servers: Server[] = [];
  const good: Server[] = [];
  let goodNodes: ReturnType<typeof node>[] = [];
  const goodIp = loopback();
  const slowConfigs: number[] = [];
  let goodConfig = 0;

  beforeAll(async () => {
    const backendIp = loopback();
    for (let i = 0; i < 2; i++) good.push(await listen((_req, res) => res.end('{"status": "ok"}'), backendIp));
    goodNodes = good.map((s) => node(address(s, backendIp)));
    const nbs = [];
    const check = { protocol: 'http' as const, check: 'http_body' as const, checkPath: '/', checkInterval: 1, checkTimeout: 1, checkPassive: false };
    // A 2 s timeout and 3 attempts: a loaded CI machine alone must not take these nodes DOWN.
    const goodCfg = config(await freePort(goodIp), goodNodes, { ...check, checkBody: '"status":\\s*"ok"', checkTimeout: 2, checkAttempts: 3 });
    goodConfig = goodCfg.id as number;
    nbs.push(nodebalancer(goodIp, [goodCfg]));
    for (const pattern of SLOW_PATTERNS) {
      const nodes = [];
      for (let i = 0; i < SLOW_NODES; i++) {
        const s = await listen(trickle, backendIp);
        servers.push(s);
        nodes.push(node(address(s, backendIp)));
      }
      const ip = loopback();
      const cfg = config(await freePort(ip), nodes, { ...check, checkBody: pattern, checkTimeout: 2, checkAttempts: 1 });
      slowConfigs.push(cfg.id as number);
      nbs.push(nodebalancer(ip, [cfg]));
    }
    dp = await startDataplaneProcess(snapshot(1, nbs));
  });
  afterAll(async () => {
    await dp?.stop();
    for (const s of [...servers, ...good]) {
      s.closeAllConnections();
      s.close();
    }
  });

  it("another tenant's nodes stay UP while the slow configs are quarantined, and go DOWN only when their backend stops", async () => {
    const up = (text: string, id: number): number | undefined => {
      const m = new RegExp(`^fulcrum_dataplane_node_up\\{[^}]*node_id="${id}"[^}]*\\} (-?\\d+)$`, 'm').exec(text);
      return m ? Number(m[1]) : undefined;
    };
    const quarantined = (text: string, configId: number): number | undefined => {
      const m = new RegExp(`^fulcrum_dataplane_check_body_quarantined\\{[^}]*config_id="${configId}"[^}]*\\} (\\d+)$`, 'm').exec(text);
      return m ? Number(m[1]) : undefined;
    };
    // Before the attack: the good nodes UP, the checks of the slow tenant's nodes running.
    await waitFor(async () => {
      const text = await dp.metrics();
      return goodNodes.every((n) => up(text, n.id as number) === 1);
    }, 30_000, 'the good nodes UP before the attack');
    attack = true;
    // Sampled from then on: the good nodes must never be DOWN (0).
    const seen: string[] = [];
    let wentDown = false;
    const started = Date.now();
    await waitFor(async () => {
      const text = await dp.metrics();
      const states = goodNodes.map((n) => up(text, n.id as number));
      seen.push(`${Date.now() - started} ms: ${states.join(',')}`);
      wentDown = states.includes(0);
      // Until every slow config is quarantined, and for 4 s at least: the attack has run.
      return wentDown || (Date.now() - started > 4000 && slowConfigs.every((c) => quarantined(text, c) === 1));
    }, 30_000, 'every slow config quarantined');
    expect(wentDown, `a good node went DOWN (samples: ${seen.join('; ')})`).toBe(false);
    const text = await dp.metrics();
    expect(quarantined(text, goodConfig)).toBe(0);
    // Whether any slow probe timed out with its match still queued depends on how busy the
    // machine is (on a quiet one the slow configs are quarantined first), so the dropping of
    // such matches is shown by test/unit/dataplane/body-match.test.ts ("drops a waiting match when
    // its probe ends, and never runs it"), not here.

    // The good tenant's checks still see a real failure: one backend stops, its node goes DOWN.
    good[0].closeAllConnections();
    await new Promise<void>((r) => good[0].close(() => r()));
    await waitFor(async () => up(await dp.metrics(), goodNodes[0].id as number) === 0, 10_000, 'the stopped node DOWN');
    expect(up(await dp.metrics(), goodNodes[1].id as number)).toBe(1);
  });
});
