// integration-lane: concurrent (startApi: an in-process control plane on port 0 with a temp state folder; addresses only as data, nothing bound but port 0).
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { makeCa, makeCert } from '../../helpers/certs.js';
import { prng } from '../../helpers/random.js';
import { testRateLimits } from '../../helpers/lab.js';

/**
 * Issue 3 acceptance 3: at least 5,000 malformed requests (bodies of wrong types, out-of-range
 * numbers, huge strings, bad JSON, bad X-Filter, odd paths, ids, methods, headers and query
 * strings) against the running server. Never a 5xx, never a crash, always the error shape with
 * exactly application/json (the harness checks both on every response), and every rejected
 * request leaves the store (all NodeBalancer, Config, Node, address, token and user rows and the
 * event count) exactly as it was. Deterministic: a fixed seed drives every choice.
 */
const SEED = 0xf00d;
const REQUESTS = 5200;

function rng(seed: number) {
  const next = prng(seed);
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
  return { next, int, pick, chance: (p: number) => next() < p };
}

describe('API fuzz', () => {
  let api: ApiHarness;
  const ids = { nb: 0, https: 0, tcp: 0, node: 0 };
  let pem: { cert: string; key: string };

  beforeAll(async () => {
    // 5200 requests in well under a minute with one token: past the product's rate limits
    // (docs/security/api.md), which test/security/api-tls-limits.test.ts checks.
    api = await startApi({ rateLimits: testRateLimits });
    pem = makeCert(makeCa(), 'fuzz.example.com');
    const nb = await api.req('POST', '/v4/nodebalancers', {
      body: {
        region: 'us-east', label: 'fuzz-nb', tags: ['fuzz'],
        configs: [
          { port: 443, protocol: 'https', ssl_cert: pem.cert, ssl_key: pem.key, nodes: [{ address: '10.0.0.1:80', label: 'node-a' }] },
          { port: 22, protocol: 'tcp', nodes: [{ address: '10.0.0.2:22', label: 'node-b' }] },
        ],
      },
    });
    ids.nb = nb.body.id;
    const cfgs = (await api.req('GET', `/v4/nodebalancers/${ids.nb}/configs`)).body.data;
    ids.https = cfgs[0].id;
    ids.tcp = cfgs[1].id;
    ids.node = (await api.req('GET', `/v4/nodebalancers/${ids.nb}/configs/${ids.tcp}/nodes`)).body.data[0].id;
  });
  afterAll(() => api.close());

  it(`survives ${REQUESTS} malformed requests with no 5xx and no change from any rejected one`, async () => {
    const r = rng(SEED);
    const huge = (n: number) => 'A'.repeat(n);
    const weird = [
      '', ' ', '\u0000', '\u202e', '💥'.repeat(50), '<script>', "'; DROP TABLE nodebalancers; --", '../../etc/passwd', '%00', 'null',
      'true', '1e309', '-0', 'NaN', '0x10', huge(300), huge(70_000), '<REDACTED>', '10.0.0.1:80', 'http', 'https', 'tcp',
    ];
    const wrongValues = (): unknown => r.pick([
      null, true, false, 0, -1, 1.5, 65536, 2 ** 53, -(2 ** 31), 1e308, 256, 21, 31, 3601, r.pick(weird), [], [1, 'a'], {}, { nested: { deep: [null] } },
      Array.from({ length: 300 }, (_, i) => i), r.int(100_000) - 50_000, String(r.int(100)),
    ]);
    const configFields = ['port', 'protocol', 'algorithm', 'stickiness', 'check', 'check_interval', 'check_timeout', 'check_attempts',
      'check_path', 'check_body', 'check_passive', 'proxy_protocol', 'cipher_suite', 'ssl_cert', 'ssl_key', 'nodes'];
    const nodeFields = ['address', 'label', 'weight', 'mode', 'id', 'port'];
    const nbFields = ['region', 'label', 'client_conn_throttle', 'tags', 'firewall_id', 'configs'];
    const validNode = () => ({ address: `10.0.${r.int(255)}.${r.int(255)}:${1 + r.int(65535)}`, label: `n-${r.int(1e6)}`, weight: 1 + r.int(255), mode: 'accept' });
    const validConfig = () => ({ port: 1000 + r.int(60000), protocol: 'tcp', nodes: [validNode()] });
    // Start from a valid body and break 1..3 fields so that most, not all, requests are invalid.
    const mutate = (base: Record<string, unknown>, fields: string[]) => {
      const b: Record<string, unknown> = { ...base };
      for (let i = 0, n = 1 + r.int(3); i < n; i++) b[r.pick(fields)] = wrongValues();
      if (r.chance(0.1)) b[`unknown_${r.int(10)}`] = wrongValues();
      return b;
    };
    const nested = () => {
      const cfg: Record<string, unknown> = mutate(validConfig(), configFields);
      if (r.chance(0.5)) cfg.nodes = [mutate(validNode(), nodeFields), validNode()];
      return cfg;
    };
    const badJson = ['{', '}', '{"region":', '{"a":1,}', "{'a':1}", '[', 'undefined', '{"a":1}{"b":2}', '\u0000{}', huge(5000), '{"a":"\\u12"}',
      '{"label":"x"' + ',"y":1'.repeat(5000) + '}', '[' .repeat(5000) + ']'.repeat(5000), '"just a string"', '12', '[]', 'null'];
    const idValues = () => r.pick(['0', '-1', 'abc', '1.5', '1e3', '99999999', '9'.repeat(30), '%20', '%E0%A4%A', '..', '%2e%2e', 'null', '00001',
      '\u00e9', '0x1', ' 1', String(ids.nb), String(ids.tcp), String(ids.node), String(ids.https)]);
    const pathFor = (): { path: string; kind: 'nb' | 'nbs' | 'cfg' | 'cfgs' | 'node' | 'nodes' | 'rebuild' | 'other' } => {
      const good = r.chance(0.85);
      const nb = good ? String(ids.nb) : idValues();
      const cfg = good ? String(r.pick([ids.tcp, ids.https])) : idValues();
      const node = good ? String(ids.node) : idValues();
      const v = r.pick(['/v4', '/v4', '/v4', '/v4beta', '/v4beta', '/v4/', '/v3', '/v4//']);
      return r.pick([
        { path: `${v}/nodebalancers`, kind: 'nbs' as const },
        { path: `${v}/nodebalancers/${nb}`, kind: 'nb' as const },
        { path: `${v}/nodebalancers/${nb}/configs`, kind: 'cfgs' as const },
        { path: `${v}/nodebalancers/${nb}/configs/${cfg}`, kind: 'cfg' as const },
        { path: `${v}/nodebalancers/${nb}/configs/${cfg}/rebuild`, kind: 'rebuild' as const },
        { path: `${v}/nodebalancers/${nb}/configs/${cfg}/nodes`, kind: 'nodes' as const },
        { path: `${v}/nodebalancers/${nb}/configs/${cfg}/nodes/${node}`, kind: 'node' as const },
        { path: `${v}/nodebalancers/${nb}/stats`, kind: 'other' as const },
        { path: `${v}/nodebalancers/${nb}/firewalls`, kind: 'other' as const },
        { path: `${v}/account/events`, kind: 'other' as const },
        { path: `${v}/account/events/${idValues()}`, kind: 'other' as const },
        { path: `${v}/profile/tokens`, kind: 'other' as const },
        { path: `${v}/profile/tokens/${idValues()}`, kind: 'other' as const },
        { path: `${v}/regions/${r.pick(['us-east', 'x', '..', huge(400)])}`, kind: 'other' as const },
        { path: `${v}/nodebalancers/${nb}/${r.pick(['vpcs', 'types', 'configs/x/y/z', '../..'])}`, kind: 'other' as const },
      ]);
    };
    const bodyFor = (kind: string): string | undefined => {
      if (r.chance(0.2)) return r.pick(badJson);
      let body: unknown;
      switch (kind) {
        case 'nbs': case 'nb': body = mutate({ region: 'us-east', label: `fz-${r.int(1e6)}`, configs: r.chance(0.5) ? [nested()] : [] }, nbFields); break;
        case 'cfgs': case 'cfg': body = mutate(validConfig(), configFields); break;
        case 'rebuild': body = { ...mutate(validConfig(), configFields), nodes: r.chance(0.3) ? wrongValues() : [mutate(validNode(), nodeFields)] }; break;
        default: body = mutate(validNode(), nodeFields);
      }
      return JSON.stringify(body);
    };
    const filterFor = (): string => r.pick([
      '{', 'null', '[]', '{"id":1}', '{"label":{"+regex":".*"}}', `{"label":"${huge(9000)}"}`, '{"+or":"x"}', '{"+and":[{"+or":[]}]}',
      '{"+order_by":"id"}', '{"+order":"sideways"}', JSON.stringify({ label: wrongValues() }), JSON.stringify({ tags: { '+contains': wrongValues() } }),
      JSON.stringify({ [r.pick(['region', 'ipv4', 'hostname', 'transfer.in', 'entity.id', '__proto__', 'constructor'])]: r.pick(weird) }),
      '{"+and":'.repeat(40) + '[{}]' + '}'.repeat(40), '{"label":{"+gt":{"+lt":1}}}', '\u00ff\u00fe',
    ]);
    const authFor = (): string | undefined => r.pick([
      undefined, `Bearer ${api.token}`, `Bearer ${api.token}`, `Bearer ${api.token}`, `Bearer ${api.token}`, `Bearer ${api.token}`, `Bearer ${api.token}`, 'Bearer', 'Bearer x', `bearer ${api.token}x`,
      `Basic ${Buffer.from('a:b').toString('base64')}`, `Bearer ${huge(4000)}`, `Bearer ${api.token} extra`, 'Bearer \u00e9\u00e9',
    ]);
    const queryFor = (): string => r.pick([
      '', '', '?page=0', '?page=-3', '?page=abc', '?page_size=10', '?page_size=600', '?page_size=1e2', '?page=1&page=2', '?page_size=',
      `?page=${'9'.repeat(40)}`, '?page_size=25.5', '?%zz=1', '?page[]=1', '?page=%00', '?page_size=100&junk=<script>', `?q=${huge(3000)}`,
    ]);
    const contentTypes = ['application/json', 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/json; charset=latin1', ''];

    const statuses = new Map<number, number>();
    let snapshot = api.snapshot();
    let rejected = 0;
    for (let i = 0; i < REQUESTS; i++) {
      const { path, kind } = pathFor();
      // Mostly a method the path serves (so bodies reach validation), sometimes any method.
      const served: Record<string, string[]> = {
        nbs: ['GET', 'POST'], nb: ['GET', 'PUT', 'DELETE'], cfgs: ['GET', 'POST'], cfg: ['GET', 'PUT', 'DELETE'],
        rebuild: ['POST'], nodes: ['GET', 'POST'], node: ['GET', 'PUT', 'DELETE'], other: ['GET', 'POST', 'PUT', 'DELETE'],
      };
      const method = r.chance(0.75) ? r.pick(served[kind]!) : r.pick(['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD']);
      let auth = authFor();
      // Keep the fixture: a DELETE with the admin token goes only to odd ids.
      if (method === 'DELETE' && auth === `Bearer ${api.token}` && !/(abc|-1|0$|99999999)/.test(path)) auth = 'Bearer x';
      const headers: Record<string, string> = {};
      if (auth !== undefined) headers.authorization = auth;
      if (r.chance(0.25)) headers['x-filter'] = filterFor();
      const ct = r.pick(contentTypes);
      if (ct) headers['content-type'] = ct;
      // fetch only sends Latin-1 header values without NUL/CR/LF: put UTF-8 bytes on the wire as-is.
      for (const [k, v] of Object.entries(headers)) headers[k] = Buffer.from(v.replace(/[\0\r\n]/g, ''), 'utf8').toString('latin1');
      const rawBody = method === 'GET' || method === 'HEAD' ? undefined : bodyFor(kind);
      const label = `#${i} ${method} ${path.slice(0, 120)} ${rawBody?.slice(0, 120) ?? ''}`;
      let res;
      try {
        res = await api.req(method, path + queryFor(), { token: null, headers, rawBody });
      } catch (e) {
        throw new Error(`${label}: ${(e as Error).message.slice(0, 1500)}`);
      }
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      expect(res.status, label).toBeLessThan(500);
      const after = api.snapshot();
      if (res.status >= 400) {
        rejected++;
        if (after !== snapshot) throw new Error(`${label}: rejected with ${res.status} but the store changed`);
      } else if (res.status === 200 && method !== 'GET' && method !== 'HEAD') {
        // An accepted rebuild may have replaced the node the paths aim at: aim at a live one again.
        const nodes = (await api.req('GET', `/v4/nodebalancers/${ids.nb}/configs/${ids.tcp}/nodes`)).body.data;
        ids.node = nodes[0]?.id ?? (await api.req('POST', `/v4/nodebalancers/${ids.nb}/configs/${ids.tcp}/nodes`, { body: validNode() })).body.id;
      }
      snapshot = api.snapshot();
    }
    // The mix really exercised every rejection path, and the server still answers normally.
    for (const s of [400, 401, 404]) expect(statuses.get(s) ?? 0, `status ${s}`).toBeGreaterThan(100);
    expect(statuses.get(403) ?? 0).toBe(0);
    expect(rejected).toBeGreaterThan(REQUESTS * 0.7);
    const alive = await api.req('GET', `/v4/nodebalancers/${ids.nb}/configs/${ids.tcp}/nodes/${ids.node}`);
    expect(alive.status).toBe(200);
    console.log(`fuzz: ${REQUESTS} requests, statuses ${JSON.stringify(Object.fromEntries(statuses))}`);
  }, 120_000);

  /** Writes raw bytes, half-closes, and collects whatever comes back until the server closes. */
  function raw(bytes: string): Promise<string> {
    const { hostname, port } = new URL(api.url);
    return new Promise((resolve, reject) => {
      const sock = connect({ host: hostname, port: Number(port) });
      const chunks: Buffer[] = [];
      const timer = setTimeout(() => (sock.destroy(), reject(new Error(`no close for ${JSON.stringify(bytes.slice(0, 60))}`))), 5000);
      sock.on('data', (d) => chunks.push(d));
      sock.on('error', () => undefined);
      sock.on('close', () => (clearTimeout(timer), resolve(Buffer.concat(chunks).toString('latin1'))));
      sock.write(bytes, 'latin1', () => sock.end());
    });
  }

  it('answers broken HTTP on the wire in the API error shape, or closes, and keeps serving', async () => {
    const auth = `Authorization: Bearer ${api.token}\r\n`;
    const cases = [
      'GARBAGE\r\n\r\n',
      'GET\r\n\r\n',
      'GET /v4/nodebalancers HTTP/9.9\r\n\r\n',
      'GET /v4/nodebalancers HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n',
      `GET /v4/nodebalancers HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
      `POST /v4/nodebalancers HTTP/1.1\r\nHost: x\r\n${auth}Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`,
      `POST /v4/nodebalancers HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: 5\r\nContent-Length: 7\r\n\r\n{"a":1}`,
      `POST /v4/nodebalancers HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: -1\r\n\r\n`,
      `POST /v4/nodebalancers HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: 100\r\n\r\n{"region":`,
      `POST /v4/nodebalancers HTTP/1.1\r\nHost: x\r\n${auth}Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n`,
      'GET /v4/nodebalancers\u0000 HTTP/1.1\r\nHost: x\r\n\r\n',
      `GET /v4/${'%'.repeat(300)} HTTP/1.1\r\nHost: x\r\n\r\n`,
      '\r\n\r\n\r\n',
      '\u0016\u0003\u0001\u0002\u0000\u0001\u0000\u0001\u00fc\u0003\u0003', // a TLS ClientHello on the plain port
    ];
    const before = api.snapshot();
    for (const c of cases) {
      const answer = await raw(c);
      if (answer === '') continue; // the request never completed (truncated body): closing is the answer
      const [head, body] = answer.split('\r\n\r\n');
      expect(head, c.slice(0, 60)).toMatch(/^HTTP\/1\.1 4\d\d /);
      expect(head!.toLowerCase(), c.slice(0, 60)).toContain('content-type: application/json\r\n');
      expect(JSON.parse(body!).errors[0].reason, c.slice(0, 60)).toBeTypeOf('string');
    }
    expect(api.snapshot()).toBe(before);
    expect((await api.req('GET', `/v4/nodebalancers/${ids.nb}`)).status).toBe(200);
  });
});
