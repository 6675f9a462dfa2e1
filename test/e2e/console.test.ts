import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'puppeteer-core';
import { api, startLab, until, type RunningLab } from '../helpers/lab.js';
import { loopback, startHttpBackend, type HttpBackend } from '../helpers/backends.js';
import { capture, clickText, controls, fill, launch, prepareConsole, textOf, waitText, watchErrors } from '../helpers/browser.js';
import { connectFrom } from './databases/db-lab.js';

/**
 * The web console in headless Chromium against a real lab (docs/console.md): every step goes
 * through the page's forms and buttons and asserts on what the page shows; each page is saved at
 * desktop and phone widths and checked with axe-core; the browser logs no error.
 */
const started = Date.now();
const step = (what: string) => console.log(`console test +${Math.round((Date.now() - started) / 1000)}s: ${what}`);

describe('web console', () => {
  let lab: RunningLab;
  let browser: Browser;
  let page: Page;
  let errors: string[];
  let call: ReturnType<typeof api>;
  const a11y: string[] = [];
  const backends: HttpBackend[] = [];
  let url: string;
  let nbPath = '';
  let dbPath = '';
  let passed = 0;

  beforeAll(async () => {
    prepareConsole();
    lab = await startLab();
    call = api(lab.info.apiUrl, lab.info.adminToken);
    url = lab.info.consoleUrl;
    expect(url).toBe(`${lab.info.apiUrl}/console/`);
    browser = await launch();
    page = await browser.newPage();
    errors = watchErrors(page);
    await page.setViewport({ width: 1280, height: 800 });
  }, 240_000);
  afterAll(async () => {
    await browser?.close();
    for (const b of backends) await b.close();
    await lab?.stop();
    if (lab && passed === 7) rmSync(lab.info.stateDir, { recursive: true, force: true });
    else if (lab) console.log(`lab state kept in ${lab.info.stateDir}`);
  });

  it('the lab prints the console URL; the link hands the token over in the fragment and drops it from the address', async () => {
    expect(lab.output()).toContain(`Console:      ${url}#token=${lab.info.adminToken}`);

    // The sign-in page first, in a tab without a token.
    await page.goto(url, { waitUntil: 'networkidle0' });
    await waitText(page, 'h1', (t) => t === 'Sign in to Fulcrum', 'the sign-in page');
    a11y.push(...(await capture(page, 'signin')));

    await page.goto(`${url}#token=${lab.info.adminToken}`, { waitUntil: 'networkidle0' });
    await waitText(page, 'h1', (t) => t === 'NodeBalancers', 'the NodeBalancers page');
    expect(page.url()).toBe(url);
    expect(await page.evaluate(() => sessionStorage.getItem('fulcrum.console.token'))).toBe(lab.info.adminToken);
    // Served with a strict policy: scripts from the origin only, no inline script.
    const res = await fetch(url);
    expect(res.headers.get('content-security-policy')).toContain("script-src 'self'");
    expect(await res.text()).not.toMatch(/<script(?![^>]*\ssrc=)[^>]*>/);
    passed++;
  });

  it('creates an HTTP NodeBalancer with two nodes through the form, shows them UP, one DOWN, and graphs traffic', async () => {
    const a = await startHttpBackend('web-a', loopback());
    const b = await startHttpBackend('web-b', loopback());
    backends.push(a, b);
    const port = String(20_000 + Math.floor(Math.random() * 20_000));

    await clickText(page, 'Create NodeBalancer', 'a');
    await waitText(page, 'h1', (t) => t === 'Create a NodeBalancer', 'the create form');
    await fill(page, '#nb-label', 'console-nb');
    await page.select('#nb-protocol', 'http');
    await fill(page, '#nb-port', port);
    await fill(page, '#nb-check_path', '/health');
    await fill(page, '#nb-check_interval', '2');
    await fill(page, '#nb-check_timeout', '1');
    await fill(page, '#nb-check_attempts', '2');
    await fill(page, '#node-0-label', 'web-a');
    await fill(page, '#node-0-address', a.address);
    await clickText(page, 'Add a node');
    await fill(page, '#node-1-label', 'web-b');
    await fill(page, '#node-1-address', b.address);
    a11y.push(...(await capture(page, 'nodebalancer-create')));
    await clickText(page, 'Create NodeBalancer');

    await until('the detail page', () => /\/console\/nodebalancers\/\d+$/.test(page.url()) || undefined, 30_000, 100);
    nbPath = new URL(page.url()).pathname;
    await waitText(page, 'h1', (t) => t === 'console-nb', 'the NodeBalancer heading');
    await waitText(page, 'tr[data-node="web-a"] .status', (t) => t === 'UP', 'web-a UP', 60_000);
    await waitText(page, 'tr[data-node="web-b"] .status', (t) => t === 'UP', 'web-b UP', 60_000);

    await b.kill();
    await waitText(page, 'tr[data-node="web-b"] .status', (t) => t === 'DOWN', 'web-b DOWN', 60_000);
    expect(await textOf(page, 'tr[data-node="web-a"] .status')).toBe('UP');

    // Traffic through the NodeBalancer's own address, read off the page.
    const ipv4 = await page.$eval('.facts', (dl) => {
      const dts = [...dl.querySelectorAll('dt')];
      return dts.find((d) => d.textContent === 'IPv4')?.nextElementSibling?.textContent ?? '';
    });
    expect(ipv4).toMatch(/^127\.77\./);
    for (let i = 0; i < 60; i++) {
      const r = await fetch(`http://${ipv4}:${port}/hello`);
      expect(await r.text()).toBe('web-a');
    }
    // The graphs refresh on their own: the latest connections figure becomes non-zero. That
    // figure is the current 5-minute bucket (UTC, docs/console.md), so traffic keeps flowing, one
    // new connection every 250 ms, until the page shows it: a single burst just before a bucket
    // boundary lands in the bucket that ends, and the page's next refresh (every 10 s, after the
    // data plane's 2 s report) then reads the new, empty bucket as 0 for good.
    let flowing = true;
    const answers: string[] = [];
    let flowError: unknown;
    const flow = (async () => {
      while (flowing) {
        answers.push(await getOnce(ipv4, Number(port), '/hello'));
        await new Promise((r) => setTimeout(r, 250));
      }
    })().catch((e: unknown) => { flowError = e; });
    try {
      await waitText(page, '[data-latest="Connections"]', (t) => Number(t) > 0, 'connections on the graph', 90_000);
      expect(Number(await textOf(page, '[data-latest="In"]'))).toBeGreaterThan(0);
    } finally {
      flowing = false;
      await flow;
    }
    if (flowError) throw flowError;
    expect(answers.length).toBeGreaterThan(0);
    expect(answers.every((t) => t === 'web-a')).toBe(true);
    expect(await page.$$('.chart canvas')).toHaveLength(2);

    // Weight is editable on the page.
    await fill(page, 'input[aria-label="Weight of web-a"]', '50');
    await clickText(page, 'Save web-a');
    await until('weight saved', async () => {
      const nodes = (await call('GET', `/v4${nbPath.replace('/console', '')}/configs`)).body.data[0];
      const list = (await call('GET', `/v4${nbPath.replace('/console', '')}/configs/${nodes.id}/nodes`)).body.data;
      return list.find((n: any) => n.label === 'web-a')?.weight === 50 || undefined;
    }, 20_000, 200);
    a11y.push(...(await capture(page, 'nodebalancer-detail')));

    await clickText(page, 'NodeBalancers', 'a');
    await waitText(page, 'tbody', (t) => t.includes('console-nb'), 'the NodeBalancer in the list');
    a11y.push(...(await capture(page, 'nodebalancers')));
    passed++;
  }, 300_000);

  it('creates a 1-node database through the form, reveals credentials that connect, takes a snapshot and lists it', async () => {
    await clickText(page, 'Databases', 'a');
    await waitText(page, 'h1', (t) => t === 'Databases', 'the Databases page');
    await clickText(page, 'Create database', 'a');
    await waitText(page, 'h1', (t) => t === 'Create a database', 'the create form');
    await until('engines loaded', async () => (await page.$$('#db-engine option')).length > 0 || undefined, 30_000, 200);
    await fill(page, '#db-label', 'console-db');
    await page.select('#db-cluster', '1');
    await fill(page, '#db-allow', '127.0.0.0/8');
    a11y.push(...(await capture(page, 'database-create')));
    await clickText(page, 'Create database');
    await until('the detail page', () => /\/console\/databases\/\d+$/.test(page.url()) || undefined, 30_000, 100);
    dbPath = new URL(page.url()).pathname;
    // The person's own create is announced when its event finishes. The toast lives 20 s and
    // may come before the page's status poll (every 3 s) shows active, so watch for it from now.
    const toastShown = waitText(page, '.toasts', (t) => t.includes('database create finished: console-db'), 'the create toast', 210_000);
    toastShown.catch(() => undefined); // awaited below; only an early failure would go unhandled
    await waitText(page, '[data-status]', (t) => t === 'active', 'the database active', 180_000);
    await toastShown;

    step('database active');
    await clickText(page, 'Reveal credentials');
    const user = await waitText(page, '[data-cred="username"]', (t) => t.length > 0, 'the username');
    const password = await textOf(page, '[data-cred="password"]');
    const host = await waitText(page, '[data-host="primary"]', (t) => /^\d+\.\d+\.\d+\.\d+$/.test(t), 'the host');
    const port = Number(await textOf(page, '[data-port]'));

    // The CA certificate through the page's download button.
    const downloads = mkdtempSync(join(tmpdir(), 'console-dl-'));
    const cdp = await page.createCDPSession();
    await cdp.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: downloads });
    await clickText(page, 'Download CA certificate');
    const caFile = await until('the CA download', () => readdirSync(downloads).find((f) => f.endsWith('.crt')), 30_000, 200);
    const ca = readFileSync(join(downloads, caFile), 'utf8');
    expect(ca).toContain('BEGIN CERTIFICATE');
    const c = await connectFrom({ source: '127.0.0.9', host, port, user, password, ca });
    const [rows] = await c.query('SELECT 1 + 1 AS two');
    expect((rows as any[])[0].two).toBe(2);
    await c.end();
    rmSync(downloads, { recursive: true, force: true });

    step('connected with the revealed credentials');
    await fill(page, '#snap-label', 'console_snap');
    await clickText(page, 'Take snapshot');
    await waitText(page, 'tr[data-backup="console_snap"]', (t) => t.includes('snapshot'), 'the snapshot listed', 180_000);
    await clickText(page, 'Hide credentials');
    a11y.push(...(await capture(page, 'database-detail')));

    await clickText(page, 'Databases', 'a');
    await waitText(page, 'tbody', (t) => t.includes('console-db'), 'the database in the list');
    a11y.push(...(await capture(page, 'databases')));
    passed++;
  }, 600_000);

  it('shows events newest first and the fleet', async () => {
    await clickText(page, 'Events', 'a');
    await waitText(page, 'tbody', (t) => t.includes('database_backup_create'), 'events');
    // Newest first: the snapshot, then the database, then the NodeBalancer made before it.
    const actions = await page.$$eval('tbody tr th', (ths) => ths.map((t) => t.textContent));
    const [snap, db, nb] = ['database_backup_create', 'database_create', 'nodebalancer_create'].map((a) => actions.indexOf(a));
    expect(snap).toBeGreaterThanOrEqual(0);
    expect(db).toBeGreaterThan(snap);
    expect(nb).toBeGreaterThan(db);
    a11y.push(...(await capture(page, 'events')));

    await clickText(page, 'Fleet', 'a');
    const dp = await waitText(page, 'tbody', (t) => t.includes('lab-dataplane'), 'the data plane');
    expect(dp).toMatch(/lab-dataplane\s+\*\s+connected\s+\d+/);
    expect(await textOf(page, 'main')).toContain('lab-agent');
    a11y.push(...(await capture(page, 'fleet')));

    expect(a11y).toEqual([]);
    expect(errors).toEqual([]);
    passed++;
  });

  it('a read-only token sees no create, edit or delete control, and the API refuses those calls', async () => {
    const made = await call('POST', '/v4/profile/tokens', { label: 'console-ro', scopes: 'nodebalancers:read_only databases:read_only events:read_only' });
    expect(made.status).toBe(200);
    const ro = made.body.token as string;
    const ctx = await browser.createBrowserContext();
    const p = await ctx.newPage();
    const roErrors = watchErrors(p);
    await p.setViewport({ width: 1280, height: 800 });
    const writeWords = /^(create|add|save|delete|remove|take snapshot|restore|suspend|resume|apply)/i;
    for (const path of ['', 'nodebalancers', nbPath.replace('/console/', ''), 'databases', dbPath.replace('/console/', ''), 'events']) {
      await p.goto(`${url}${path}#token=${ro}`, { waitUntil: 'networkidle0' });
      await until(`${path} loaded`, async () => !(await textOf(p, 'main')).includes('Loading') || undefined, 30_000, 200);
      await new Promise((r) => setTimeout(r, 500));
      const seen = await controls(p);
      expect(seen.filter((t) => writeWords.test(t)), `write controls on /${path}`).toEqual([]);
      expect(seen.filter((t) => /^(input|select|textarea)#/.test(t)), `fields on /${path}`).toEqual([]);
    }
    expect(roErrors).toEqual([]);
    await ctx.close();

    const asRo = api(lab.info.apiUrl, ro);
    const nbId = Number(nbPath.split('/').pop());
    const dbId = Number(dbPath.split('/').pop());
    for (const [method, path, body] of [
      ['POST', '/v4/nodebalancers', { region: 'us-east', label: 'nope' }],
      ['DELETE', `/v4/nodebalancers/${nbId}`, undefined],
      ['PUT', `/v4/nodebalancers/${nbId}`, { label: 'renamed' }],
      ['POST', '/v4/databases/mysql/instances', { label: 'nope' }],
      ['PUT', `/v4/databases/mysql/instances/${dbId}`, { allow_list: [] }],
      ['POST', `/v4/databases/mysql/instances/${dbId}/backups`, { label: 'nope' }],
      ['DELETE', `/v4/databases/mysql/instances/${dbId}`, undefined],
    ] as const) {
      const r = await asRo(method, path, body);
      expect(r.status, `${method} ${path}`).toBe(401);
    }
    passed++;
  });

  it('deletes the NodeBalancer and the database after a dialog naming each label', async () => {
    for (const [path, label, button, list] of [[nbPath, 'console-nb', 'Delete NodeBalancer', '/v4/nodebalancers'], [dbPath, 'console-db', 'Delete database', '/v4/databases/mysql/instances']] as const) {
      await page.goto(`${lab.info.apiUrl}${path}`, { waitUntil: 'networkidle0' });
      await waitText(page, 'h1', (t) => t === label, `the ${label} page`);
      await clickText(page, button);
      const question = await waitText(page, 'dialog[open] p', (t) => t.length > 0, 'the confirmation');
      expect(question).toContain(label);
      await clickText(page, `Delete ${label}`);
      await waitText(page, 'h1', (t) => t === (label === 'console-nb' ? 'NodeBalancers' : 'Databases'), 'the list after delete');
      await until(`${label} gone from the API`, async () => !(await call('GET', list)).body.data.some((x: any) => x.label === label) || undefined, 60_000, 250);
    }
    passed++;
  });

  it('a refused token shows a clear message on the sign-in page', async () => {
    const ctx = await browser.createBrowserContext();
    const p = await ctx.newPage();
    const seen = watchErrors(p);
    await p.goto(`${url}nodebalancers#token=not-a-real-token`, { waitUntil: 'networkidle0' });
    await waitText(p, 'h1', (t) => t === 'Sign in to Fulcrum', 'the sign-in page');
    await p.type('#token', 'still-not-a-token');
    await clickText(p, 'Sign in');
    await waitText(p, '[role="alert"]', (t) => t.includes('refused'), 'the refusal message');
    // The only errors are the two refused requests themselves.
    expect(seen.length).toBeGreaterThan(0);
    expect(seen.every((e) => /status of 401/.test(e))).toBe(true);
    await ctx.close();
    passed++;
  });
});

/** One GET on a connection of its own (no keep-alive), so every call is a new connection the data plane counts. */
function getOnce(host: string, port: number, path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request({ host, port, path, agent: false, headers: { connection: 'close' }, timeout: 10_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve(body));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${path} timed out`)));
    req.on('error', reject);
    req.end();
  });
}
