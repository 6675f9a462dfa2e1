import type { ChildProcess } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import { Agent, request as httpsRequest } from 'node:https';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeCa, makeCert } from '../helpers/certs.js';
import { startControlPlaneProcess } from '../helpers/lab.js';

/**
 * The API's own boundary (docs/security/api.md), attacked on a real `fulcrum control-plane`
 * process started with a certificate: the API only speaks HTTPS on its port, a client that keeps
 * calling past the advertised `X-RateLimit-Limit` gets 429 with `Retry-After`, a restricted user
 * cannot list data planes or agents, and metrics are not on the API port.
 */

interface Res {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: any;
}

describe('API: TLS, rate limits, admin-only endpoints, metrics listener', () => {
  let dir: string;
  let proc: ChildProcess;
  let apiUrl: string;
  let metricsUrl: string;
  let adminToken: string;
  let restrictedToken: string;
  let agent: Agent;

  /** A request over HTTPS trusting only the test CA (the client of an operator's own PKI). */
  const call = (method: string, path: string, token: string | null, body?: unknown): Promise<Res> =>
    new Promise((resolve, reject) => {
      const payload = body === undefined ? undefined : JSON.stringify(body);
      const headers: Record<string, string> = { accept: 'application/json' };
      if (token) headers.authorization = `Bearer ${token}`;
      if (payload) headers['content-type'] = 'application/json';
      const req = httpsRequest(`${apiUrl}${path}`, { method, headers, agent }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text ? JSON.parse(text) : undefined }));
      });
      req.on('error', reject);
      req.end(payload);
    });

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-sec-api-'));
    const ca = makeCa('Fulcrum API test CA');
    const leaf = makeCert(ca, '127.0.0.1');
    writeFileSync(join(dir, 'api.crt'), leaf.cert);
    writeFileSync(join(dir, 'api.key'), leaf.key, { mode: 0o600 });
    agent = new Agent({ ca: ca.cert, keepAlive: true, maxSockets: 16 });
    const state = join(dir, 'cp');
    const started = await startControlPlaneProcess(state, ['--api-cert', join(dir, 'api.crt'), '--api-key', join(dir, 'api.key'), '--metrics-port', '0']);
    proc = started.proc;
    const info = started.info;
    apiUrl = info.apiUrl;
    // Given --metrics-port, it always has one.
    metricsUrl = info.metricsUrl!;
    adminToken = readFileSync(join(state, 'admin-token'), 'utf8').trim();

    const user = await call('POST', '/v4/account/users', adminToken, { username: 'tenant-a', email: 'a@example.com', restricted: true });
    expect(user.status).toBe(200);
    const tok = await call('POST', '/v4/fulcrum/users/tenant-a/tokens', adminToken, { label: 'tenant', scopes: '*' });
    expect(tok.status).toBe(200);
    restrictedToken = tok.body.token;
  });

  afterAll(async () => {
    if (proc && proc.exitCode === null) {
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await exited;
    }
    agent?.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('serves the API over HTTPS with the given certificate, and plain HTTP on that port gets no API', async () => {
    expect(apiUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const r = await call('GET', '/v4/regions', null);
    expect(r.status).toBe(200);
    expect(r.body.data.length).toBeGreaterThan(0);

    const plain = apiUrl.replace('https://', 'http://');
    const outcome = await new Promise<string>((resolve) => {
      const req = httpRequest(`${plain}/v4/regions`, (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve(`status ${res.statusCode}: ${text}`));
      });
      req.on('error', (err) => resolve(`error ${(err as NodeJS.ErrnoException).code ?? err.message}`));
      req.setTimeout(5000, () => req.destroy(new Error('timeout')));
      req.end();
    });
    expect(outcome).not.toMatch(/^status 200/);
    expect(outcome).not.toContain('us-east');
  });

  it('does not serve /metrics on the API port; the metrics listener does, on loopback', async () => {
    const onApi = await call('GET', '/metrics', null);
    expect(onApi.status).toBe(404);
    expect(onApi.body).toEqual({ errors: [{ reason: 'Not found' }] });
    expect(metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    const text = await (await fetch(metricsUrl)).text();
    expect(text).toMatch(/^# HELP /m);
    expect(text).toContain('fulcrum_api_rate_limited_total');
  });

  it('refuses a restricted user on /v4/fulcrum/* the way it refuses admin-only endpoints elsewhere', async () => {
    const elsewhere = await call('GET', '/v4/account/users', restrictedToken);
    expect(elsewhere.status).toBe(403);
    for (const path of ['/v4/fulcrum/dataplanes', '/v4/fulcrum/agents', '/v4beta/fulcrum/dataplanes', '/v4beta/fulcrum/agents']) {
      const r = await call('GET', path, restrictedToken);
      expect(r.status, path).toBe(elsewhere.status);
      expect(r.body, path).toEqual(elsewhere.body);
      expect(JSON.stringify(r.body)).not.toMatch(/lab-|dataplane-|agent-/);
    }
    // The unrestricted admin still sees them.
    expect((await call('GET', '/v4/fulcrum/dataplanes', adminToken)).status).toBe(200);
    expect((await call('GET', '/v4/fulcrum/agents', adminToken)).status).toBe(200);
  });

  it('answers 429 with Retry-After past the advertised per-token limit, with truthful headers', async () => {
    const first = await call('GET', '/v4/nodebalancers', restrictedToken);
    expect(first.status).toBe(200);
    const limit = Number(first.headers['x-ratelimit-limit']);
    expect(limit).toBe(400);
    let remaining = Number(first.headers['x-ratelimit-remaining']);
    const reset = Number(first.headers['x-ratelimit-reset']);
    expect(remaining).toBeLessThan(limit);
    expect(reset).toBeGreaterThanOrEqual(Math.floor(Date.now() / 1000));
    expect(reset).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000) + 60);
    // Spend the rest of the window: Remaining counts down by one per request to 0.
    while (remaining > 0) {
      const r = await call('GET', '/v4/nodebalancers', restrictedToken);
      expect(r.status).toBe(200);
      const next = Number(r.headers['x-ratelimit-remaining']);
      expect(next).toBe(remaining - 1);
      expect(Number(r.headers['x-ratelimit-limit'])).toBe(limit);
      remaining = next;
    }
    const refused = await call('GET', '/v4/nodebalancers', restrictedToken);
    expect(refused.status).toBe(429);
    expect(refused.body).toEqual({ errors: [{ reason: 'Too many requests' }] });
    expect(refused.headers['content-type']).toBe('application/json');
    const retryAfter = Number(refused.headers['retry-after']);
    expect(Number.isInteger(retryAfter)).toBe(true);
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(refused.headers['x-ratelimit-remaining']).toBe('0');
    expect(Number(refused.headers['x-ratelimit-limit'])).toBe(limit);
    // Writes are refused too, before they change anything.
    const write = await call('POST', '/v4/nodebalancers', restrictedToken, { region: 'us-east' });
    expect(write.status).toBe(429);
    // Another token is its own bucket.
    expect((await call('GET', '/v4/nodebalancers', adminToken)).status).toBe(200);
  });

  it('limits one client address too, whatever tokens it sends (guessing tokens included)', async () => {
    // 1600 per minute per address by default; a stream of invalid tokens is counted against it.
    let last: Res | undefined;
    let sent = 0;
    const limit = 1600;
    while (sent < limit + 50) {
      const batch = await Promise.all(Array.from({ length: 50 }, (_, i) => call('GET', '/v4/nodebalancers', `guess-${sent + i}`)));
      sent += batch.length;
      last = batch.find((r) => r.status === 429);
      if (last) break;
      for (const r of batch) expect(r.status).toBe(401);
    }
    expect(last?.status).toBe(429);
    expect(last!.body).toEqual({ errors: [{ reason: 'Too many requests' }] });
    expect(Number(last!.headers['x-ratelimit-limit'])).toBe(limit);
    expect(last!.headers['x-ratelimit-remaining']).toBe('0');
    expect(Number(last!.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    // The admin, from the same address, is now refused as well: the address is out of requests.
    expect((await call('GET', '/v4/regions', null)).status).toBe(429);
  });
});
