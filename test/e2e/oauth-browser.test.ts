// e2e-lane: concurrent (an in-process control plane on port 0, app servers on port 0 at 127.93.41.1 and localhost, its own Chromium).
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'puppeteer-core';
import { startApi, type ApiHarness } from '../helpers/api-harness.js';
import { chromiumPath, launch, watchErrors } from '../helpers/browser.js';
import { until } from '../helpers/lab.js';
import { registerClient } from '../helpers/oauth.js';

/**
 * The install's OAuth login in headless Chromium (docs/security/api.md, "OAuth login"), driven as
 * a person would: the authorization code flow with PKCE S256 from a page on another origin, the
 * way Cloud Manager does it (@linode/oauth: verifier in localStorage, `redirect_uri` with
 * `?returnTo=`, the code exchanged by fetch with a multipart body, then `/profile` with the
 * token), and the implicit flow the way linode-cli's web login does it (its client id, a
 * redirect to http://localhost on the port it listens on, the token read from the fragment by a
 * landing page and sent back to the local server, then `/profile`).
 */

/** A minimal Cloud Manager: the start page sends the browser to the login, the callback finishes the sign-in. */
function cloudManagerPages(login: string, apiRoot: string, clientId: string, appRoot: string): (path: string) => string {
  const start = `<!doctype html><html><head><title>app</title></head><body><p id="out">starting</p><script type="module">
const verifier = Array.from(crypto.getRandomValues(new Uint8Array(32)), (b) => b.toString(16).padStart(2, '0')).join('');
const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier)));
const challenge = btoa(String.fromCharCode(...digest)).replace(/\\+/g, '-').replace(/\\//g, '_').replace(/=+$/, '');
const nonce = crypto.randomUUID();
localStorage.setItem('authentication/code-verifier', verifier);
localStorage.setItem('authentication/nonce', nonce);
const q = new URLSearchParams({ client_id: ${JSON.stringify(clientId)}, code_challenge: challenge, code_challenge_method: 'S256',
  redirect_uri: ${JSON.stringify(`${appRoot}/oauth/callback`)} + '?returnTo=/nodebalancers', response_type: 'code', scope: '*', state: nonce });
window.location.assign(${JSON.stringify(login)} + '/oauth/authorize?' + q.toString());
</script></body></html>`;
  const callback = `<!doctype html><html><head><title>callback</title></head><body><p id="out">exchanging</p><script type="module">
const out = document.getElementById('out');
try {
  const params = new URLSearchParams(window.location.search);
  if (params.get('state') !== localStorage.getItem('authentication/nonce')) throw new Error('state differs');
  const form = new FormData();
  form.append('grant_type', 'authorization_code');
  form.append('client_id', ${JSON.stringify(clientId)});
  form.append('code', params.get('code'));
  form.append('state', params.get('state'));
  form.append('code_verifier', localStorage.getItem('authentication/code-verifier'));
  const res = await fetch(${JSON.stringify(login)} + '/oauth/token', { method: 'POST', body: form });
  const tok = await res.json();
  if (!res.ok) throw new Error('token: ' + res.status + ' ' + JSON.stringify(tok));
  const profile = await (await fetch(${JSON.stringify(apiRoot)} + '/v4/profile', { headers: { Authorization: 'Bearer ' + tok.access_token } })).json();
  out.textContent = 'signed in as ' + profile.username + ' scopes ' + tok.scopes + ' expires_in ' + tok.expires_in + ' returnTo ' + params.get('returnTo');
} catch (e) {
  out.textContent = 'failed: ' + e.message;
}
</script></body></html>`;
  return (path) => (path.startsWith('/oauth/callback') ? callback : start);
}

/** linode-cli's landing page: the token is in the fragment, which only the page sees; it sends it to the local server. */
const cliLanding = `<!doctype html><html><head><title>linode-cli</title></head><body><p id="out">waiting</p><script>
const r = new XMLHttpRequest();
r.open('GET', '/token/' + window.location.hash.substr(1));
r.onload = () => { document.getElementById('out').textContent = 'token sent'; };
r.send();
</script></body></html>`;

async function serve(host: string, handler: (path: string) => string | undefined): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => {
    const body = handler(req.url ?? '/');
    res.writeHead(body === undefined ? 204 : 200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
    res.end(body ?? '');
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return { server, port: (server.address() as AddressInfo).port };
}

describe('OAuth login in Chromium', () => {
  let api: ApiHarness;
  let browser: Browser;
  const servers: Server[] = [];

  beforeAll(async () => {
    expect(existsSync(chromiumPath), `${chromiumPath} (Debian's chromium; scripts/install-system-deps.sh)`).toBe(true);
    api = await startApi();
    browser = await launch();
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    for (const s of servers) await new Promise((r) => s.close(r));
    await api?.close();
  });

  async function signInOnPage(page: Page, token: string): Promise<void> {
    await page.waitForSelector('#token', { timeout: 60_000 });
    expect(new URL(page.url()).origin).toBe(api.url);
    expect(new URL(page.url()).pathname).toBe('/login/oauth/authorize');
    await page.type('#token', token);
    await Promise.all([page.waitForNavigation({ timeout: 60_000 }), page.click('button[type=submit]')]);
  }

  it('authorization code + PKCE from another origin, as Cloud Manager does, then /profile with the token', async () => {
    const appRoot = 'http://127.93.41.1';
    // The pages name the client, registered with the server's port: filled in once it listens.
    const pages: { of?: (p: string) => string } = {};
    const app = await serve('127.93.41.1', (p) => pages.of?.(p));
    servers.push(app.server);
    const origin = `${appRoot}:${app.port}`;
    const client = await registerClient(api, { label: 'cloud-manager', redirect_uri: `${origin}/oauth/callback`, public: true });
    pages.of = cloudManagerPages(`${api.url}/login`, api.url, client.id, origin);

    const page = await browser.newPage();
    const errors = watchErrors(page);
    await page.goto(`${origin}/`);
    await signInOnPage(page, api.token);
    const text = await until('the callback page signed in', async () => {
      const t = await page.$eval('#out', (e) => e.textContent ?? '').catch(() => '');
      return t.startsWith('signed in') || t.startsWith('failed') ? t : undefined;
    }, 60_000, 200);
    expect(text).toBe('signed in as admin scopes * expires_in 7200 returnTo /nodebalancers');
    expect(new URL(page.url()).origin).toBe(origin);
    expect(errors).toEqual([]);
    await page.close();
  });

  it('the implicit grant to a localhost redirect, as linode-cli\'s web login does, then /profile with the token', async () => {
    let captured: string | undefined;
    const cli = await serve('127.0.0.1', (p) => {
      if (p.startsWith('/token/')) {
        captured = /access_token=([a-z0-9]+)/.exec(p)?.[1];
        return undefined;
      }
      return cliLanding;
    });
    servers.push(cli.server);
    const page = await browser.newPage();
    const errors = watchErrors(page);
    const q = new URLSearchParams({ client_id: '5823b4627e45411d18e9', response_type: 'token', scopes: '*', redirect_uri: `http://localhost:${cli.port}` });
    await page.goto(`${api.url}/login/oauth/authorize?${q}`);
    await signInOnPage(page, api.token);
    const token = await until('the landing page sent the token', () => captured, 60_000, 100);
    expect(new URL(page.url()).host).toBe(`localhost:${cli.port}`);
    const profile = await api.req('GET', '/v4/profile', { token });
    expect(profile.status).toBe(200);
    expect(profile.body.username).toBe('admin');
    expect(errors).toEqual([]);
    await page.close();
  });
});
