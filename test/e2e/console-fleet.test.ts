// e2e-lane: concurrent (an in-process control plane on port 0, scripted agents over mutual TLS to it, its own Chromium).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'puppeteer-core';
import { startApi, type ApiHarness } from '../helpers/api-harness.js';
import { capture, launch, prepareConsole, textOf, waitText, watchErrors } from '../helpers/browser.js';
import { issueHostPki } from '../helpers/fleet.js';
import { until } from '../helpers/lab.js';
import { mtlsCredentials } from '../../lib/grpc.js';
import { isControlPlaneCert } from '../../lib/fleet-host.js';
import { MYSQL, firstEngine, waitStatus } from '../integration/databases/helpers.js';
import { startScriptedAgent, type ScriptedAgent } from '../integration/databases/scripted-agent.js';

/**
 * The console's Fleet page in headless Chromium (docs/console.md, "Fleet"): three agent hosts
 * joined with certificates from the control plane's fleet CA, a 3-node database spread over them
 * whose label is an HTML tag (tenants write labels), a 1-node database, and one host declared
 * lost. The page shows each host's state, region and members (database, member, role, node
 * status) and the lost host's event; the hostile label is text everywhere, never markup; an
 * unrestricted user only. The agents are scripted (test/integration/databases/scripted-agent.ts,
 * real gRPC streams, no MariaDB): this file is about the page; the real agents' member reports
 * are the e2e fleets' (db-host-lost, multi-host).
 */
const HOSTILE = '<img id=pwn src=/x onerror=z()>';

describe('console: the Fleet page', () => {
  let api: ApiHarness;
  let browser: Browser;
  let page: Page;
  let errors: string[];
  const agents = new Map<string, ScriptedAgent>();
  const fleetUrl = () => `${api.url}/console/fleet`;

  beforeAll(async () => {
    prepareConsole();
    api = await startApi();
    for (const id of ['fleet-a', 'fleet-b', 'fleet-c']) {
      const pki = await issueHostPki(api.cp, 'agent', id, 'us-east');
      agents.set(id, startScriptedAgent(api.cp.grpcAddress, { id, region: 'us-east', membersAcrossHosts: true, heartbeatMs: 500, credentials: mtlsCredentials(pki, isControlPlaneCert) }));
    }
    await until('three agents up', async () => ((await api.req('GET', '/v4/fulcrum/agents')).body.data as { state: string }[]).filter((a) => a.state === 'up').length === 3 || undefined, 60_000);
    browser = await launch();
    page = await browser.newPage();
    errors = watchErrors(page);
    await page.setViewport({ width: 1280, height: 800 });
  }, 240_000);
  afterAll(async () => {
    await browser?.close();
    for (const a of agents.values()) a.close();
    await api?.close();
  });

  it('shows each host with its state, region, members and the lost host\'s event; a hostile label stays text', async () => {
    const engine = await firstEngine(api);
    const spread = await api.req('POST', MYSQL, { body: { label: HOSTILE, region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 3 } });
    expect(spread.status).toBe(200);
    const id = spread.body.id as number;
    await waitStatus(api, id, 'active', 60_000);
    const placed = await api.cp.context.store.databases.members(id);
    expect(new Set(placed.map((m) => m.agentId)).size).toBe(3);

    // A replica's host is declared lost; with no fourth host its member waits, placed nowhere.
    const victim = placed.find((m) => m.member === 2)!.agentId;
    expect((await api.req('POST', `/v4/fulcrum/agents/${victim}/lost`)).status).toBe(200);
    agents.get(victim)!.close();
    const up = ['fleet-a', 'fleet-b', 'fleet-c'].filter((h) => h !== victim);

    // A 1-node database lands on one of the two hosts still up.
    const single = await api.req('POST', MYSQL, { body: { label: 'fleet-single', region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 1 } });
    expect(single.status).toBe(200);
    const singleId = single.body.id as number;
    await waitStatus(api, singleId, 'active', 60_000);
    const singleHost = (await api.cp.context.store.databases.members(singleId))[0]!.agentId;
    expect(up).toContain(singleHost);

    await page.goto(`${fleetUrl()}#token=${api.token}`, { waitUntil: 'networkidle0' });
    await waitText(page, 'h1', (t) => t === 'Fleet', 'the Fleet page');
    await waitText(page, `section[data-host="${victim}"] [data-host-state]`, (t) => t.trim() === 'lost', 'the lost host', 30_000);
    // The page polls every 5 s: wait until both members of the spread database on the up hosts report running.
    for (const h of up) {
      await waitText(page, `section[data-host="${h}"] tr[data-member^="${id}:"]`, (t) => /running/.test(t), `${h}'s member running`, 30_000);
      expect((await textOf(page, `section[data-host="${h}"] [data-host-state]`)).trim()).toBe('up');
      expect(await textOf(page, `section[data-host="${h}"] [data-host-region]`)).toBe('us-east');
    }
    await waitText(page, `section[data-host="${singleHost}"] tr[data-member="${singleId}:1"]`, (t) => /running/.test(t), 'the 1-node member running', 30_000);

    // Members per host, as the page lays them out: database label, id, node, role, status.
    const rows = await page.$$eval('section[data-host] tr[data-member]', (trs) => trs.map((tr) => ({
      host: tr.closest('section')!.getAttribute('data-host'),
      cells: [...tr.querySelectorAll('th, td')].map((c) => (c as HTMLElement).innerText.trim()),
    })));
    const expected = [
      ...placed.filter((m) => m.agentId !== victim).map((m) => ({ host: m.agentId, cells: [HOSTILE, String(id), `node ${m.member}`, m.member === 1 ? 'primary' : 'replica', 'running'] })),
      { host: singleHost, cells: ['fleet-single', String(singleId), 'node 1', 'primary', 'running'] },
    ];
    const key = (r: { host: string | null; cells: string[] }) => `${r.host} ${r.cells.join('|')}`;
    expect(rows.map(key).sort()).toEqual(expected.map(key).sort());
    // The lost host runs nothing now, and its event names the member and the host.
    expect(await textOf(page, `section[data-host="${victim}"] [data-host-members]`)).toBe('No members on this host.');
    const events = await textOf(page, `section[data-host="${victim}"] .host-events`);
    expect(events).toContain(`database ${HOSTILE}: The host of member 2 (agent ${victim}) was declared lost`);
    // The overview table counts each host's members.
    const counts = await page.$$eval('table tbody tr', (trs) => trs.map((tr) => [...tr.querySelectorAll('th, td')].map((c) => (c as HTMLElement).innerText.trim())));
    expect(counts.find((c) => c[0] === victim)?.slice(3, 5)).toEqual(['lost', '0']);
    expect(counts.find((c) => c[0] === singleHost)?.slice(3, 5)).toEqual(['up', '2']);

    // The label is text wherever it appears (a member row, the event, the link): no element was made of it.
    expect(await page.$('#pwn')).toBeNull();
    expect(await page.$$eval('main img', (imgs) => imgs.length)).toBe(0);
    const links = await page.$$eval(`section[data-host] tr[data-member^="${id}:"] a`, (as) => as.map((a) => [a.textContent, a.getAttribute('href')]));
    expect(links.length).toBe(2);
    for (const l of links) expect(l).toEqual([HOSTILE, `/console/databases/${id}`]);

    expect(await capture(page, 'fleet-hosts')).toEqual([]);
    expect(errors).toEqual([]);
  }, 240_000);

  it('a restricted user is shown no host', async () => {
    const restricted = await api.userToken('fleet-viewer', { restricted: true, grants: { global: { add_databases: true } }, scopes: 'databases:read_only' });
    expect((await api.req('GET', '/v4/fulcrum/agents', { token: restricted })).status).toBe(403);
    const ctx = await browser.createBrowserContext();
    const p = await ctx.newPage();
    await p.goto(`${fleetUrl()}#token=${restricted}`, { waitUntil: 'networkidle0' });
    await waitText(p, 'main', (t) => t.includes('The fleet is shown to unrestricted users only.'), 'the refusal');
    expect(await p.$$('section[data-host]')).toEqual([]);
    await ctx.close();
  });
});
