import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serveRelay, type RunningRelay } from '../../../bench/dataplane/relay.js';
import { loopback, patternBytes, sha256, startHttpBackend, type HttpBackend } from '../../helpers/backends.js';
import { makeCa, makeCert } from '../../helpers/certs.js';

// The bare Node relay of bench:dataplane (bench/dataplane/relay.ts) is the floor our data plane's
// CPU per request is compared with; a floor that mangled or dropped requests would measure less
// work than ours does. It must do the same work correctly: keep-alive with a backend pool, round
// robin, X-Forwarded-*, framing by Content-Length and chunked coding, a client's close, TLS, tcp.

interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  reused: boolean;
}

function get(url: string, agent: Agent, opts: { method?: string; headers?: Record<string, string>; body?: Buffer } = {}): Promise<Reply> {
  const request = url.startsWith('https:') ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = request(url, { agent, method: opts.method ?? 'GET', headers: opts.headers, rejectUnauthorized: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (d: Buffer) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks), reused: req.reusedSocket }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

let dir: string;
let a: HttpBackend;
let b: HttpBackend;
let relay: RunningRelay;
let ip: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fulcrum-relay-test-'));
  const pem = makeCert(makeCa(), 'relay.test');
  writeFileSync(join(dir, 'cert.pem'), pem.cert);
  writeFileSync(join(dir, 'key.pem'), pem.key, { mode: 0o600 });
  a = await startHttpBackend('a');
  b = await startHttpBackend('b');
  ip = loopback();
  relay = await serveRelay({
    ip, ports: { http: 0, tcp: 0, https: 0 }, backends: [a, b].map((x) => ({ host: x.ip, port: x.port })),
    certFile: join(dir, 'cert.pem'), keyFile: join(dir, 'key.pem'), workers: 1,
  });
}, 60_000);

afterAll(async () => {
  await relay?.close();
  await a?.close();
  await b?.close();
  rmSync(dir, { recursive: true, force: true });
});

for (const proto of ['http', 'https'] as const) {
  describe(`bare relay, ${proto}`, () => {
    it('keeps the client connection, balances round robin and adds X-Forwarded-*', async () => {
      const agent = proto === 'https' ? new HttpsAgent({ keepAlive: true, maxSockets: 1 }) : new Agent({ keepAlive: true, maxSockets: 1 });
      const url = `${proto}://${ip}:${relay.ports[proto]}/`;
      const replies: Reply[] = [];
      for (let i = 0; i < 4; i++) replies.push(await get(url, agent));
      agent.destroy();
      expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 200]);
      const names = replies.map((r) => r.body.toString());
      expect(new Set(names)).toEqual(new Set(['a', 'b']));
      expect(names[0]).not.toBe(names[1]);
      expect(names[0]).toBe(names[2]);
      expect(replies.slice(1).every((r) => r.reused)).toBe(true);
      expect(a.lastHeaders?.['x-forwarded-proto']).toBe(proto);
      expect(a.lastHeaders?.['x-forwarded-for']).toMatch(/^127\.\d+\.\d+\.\d+$/);
    });

    it('frames Content-Length and chunked responses, and passes request bodies on', async () => {
      const agent = proto === 'https' ? new HttpsAgent({ keepAlive: true, maxSockets: 1 }) : new Agent({ keepAlive: true, maxSockets: 1 });
      const base = `${proto}://${ip}:${relay.ports[proto]}`;
      const size = 300_000;
      const want = sha256(patternBytes(size, 5));
      const plain = await get(`${base}/download?bytes=${size}&seed=5`, agent);
      const chunked = await get(`${base}/download?bytes=${size}&seed=5&chunked=1`, agent);
      expect(chunked.headers['transfer-encoding']).toBe('chunked');
      const body = patternBytes(100_000, 9);
      const up = await get(`${base}/upload`, agent, { method: 'POST', body });
      const after = await get(`${base}/`, agent);
      agent.destroy();
      expect([plain.body.length, sha256(plain.body)]).toEqual([size, want]);
      expect([chunked.body.length, sha256(chunked.body)]).toEqual([size, want]);
      expect(up.body.toString()).toBe(`${body.length} ${sha256(body)}`);
      expect([after.status, after.reused]).toEqual([200, true]);
    });

    it("answers a client's Connection: close with one and closes, keeping the backend connection", async () => {
      const agent = proto === 'https' ? new HttpsAgent({ keepAlive: false }) : new Agent({ keepAlive: false });
      const url = `${proto}://${ip}:${relay.ports[proto]}/`;
      const r = await get(url, agent, { headers: { connection: 'close' } });
      expect(r.status).toBe(200);
      expect(r.headers.connection).toBe('close');
      // Connection is hop-by-hop: the client's close was not passed on, so the backend keeps its connection.
      const last = [a, b].find((x) => x.name === r.body.toString())!;
      expect(last.lastHeaders?.connection).toBeUndefined();
    });
  });
}

describe('bare relay, tcp', () => {
  it('pipes an exchange to the backends, round robin', async () => {
    const agent = new Agent({ keepAlive: false });
    const url = `http://${ip}:${relay.ports.tcp}/`;
    const names = [(await get(url, agent)).body.toString(), (await get(url, agent)).body.toString()];
    expect(names.sort()).toEqual(['a', 'b']);
  });
});
