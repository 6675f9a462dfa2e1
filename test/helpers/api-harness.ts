import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startControlPlane, type ControlPlane, type ControlPlaneOptions } from '../../control-plane/main.js';
import { silentLogger } from '../../lib/logger.js';
import type { Grants } from '../../control-plane/domain/auth/model.js';
import { assertResponseSchema } from './api-schema.js';

export interface ApiResponse<T = any> {
  status: number;
  headers: Headers;
  text: string;
  body: T;
}

export interface RequestOptions {
  body?: unknown;
  /** Sent as-is instead of JSON.stringify(body). */
  rawBody?: string;
  /** Overrides the default admin token; null sends no Authorization header. */
  token?: string | null;
  headers?: Record<string, string>;
}

/**
 * An in-process control plane on port 0 with a temp state folder, plus a fetch-based client
 * that checks, on every response, the exact Content-Type and the body against the official
 * schema of the operation (test/helpers/api-schema.ts).
 */
export interface ApiHarness {
  cp: ControlPlane;
  url: string;
  token: string;
  stateDir: string;
  req<T = any>(method: string, path: string, opts?: RequestOptions): Promise<ApiResponse<T>>;
  /** Creates a user (restricted or not) with a token of the given scopes; returns the secret. */
  userToken(username: string, opts: { restricted: boolean; grants?: Partial<Grants>; scopes?: string }): Promise<string>;
  /** Replaces a user's grants (as an administrator editing them would). */
  setGrants(username: string, grants: Partial<Grants>): void;
  /** JSON of every NodeBalancer/Config/Node/address/token/user row and the event count. */
  snapshot(): string;
  close(): Promise<void>;
}

/** What test harnesses configure as backend networks: everything, loopback included. */
export const testBackendNetworks = ['0.0.0.0/0', '127.0.0.0/8'];

export async function startApi(opts: Partial<ControlPlaneOptions> = {}): Promise<ApiHarness> {
  const stateDir = mkdtempSync(join(tmpdir(), 'fulcrum-api-'));
  // Tests use loopback and documentation addresses as backends: allow loopback explicitly, as
  // the lab does (the product default refuses it; docs/security/api.md). Pass
  // `backendNetworks: undefined` to test the product default.
  const cp = await startControlPlane({ stateDir, apiPort: 0, grpcPort: 0, logger: silentLogger(), backendNetworks: testBackendNetworks, ...opts });
  const db = cp.context.db!;
  const grantsOf = (g: Partial<Grants> = {}): Grants => ({ global: {}, nodebalancer: {}, database: {}, ...g });

  const req = async <T>(method: string, path: string, o: RequestOptions = {}): Promise<ApiResponse<T>> => {
    const headers: Record<string, string> = { accept: 'application/json', ...(o.headers ?? {}) };
    const token = o.token === undefined ? cp.adminToken : o.token;
    if (token !== null && headers.authorization === undefined) headers.authorization = `Bearer ${token}`;
    let payload: string | undefined = o.rawBody;
    if (payload === undefined && o.body !== undefined) payload = JSON.stringify(o.body);
    if (payload !== undefined && headers['content-type'] === undefined) headers['content-type'] = 'application/json';
    const res = await fetch(cp.apiUrl + path, { method, headers, body: payload });
    const text = await res.text();
    const ct = res.headers.get('content-type');
    if (ct !== 'application/json') throw new Error(`${method} ${path} -> ${res.status}: Content-Type ${ct}, want exactly application/json`);
    let body: any;
    try {
      body = text === '' && (method === 'HEAD' || res.status === 204) ? undefined : JSON.parse(text);
    } catch {
      throw new Error(`${method} ${path} -> ${res.status}: body is not JSON: ${text.slice(0, 200)}`);
    }
    if (res.status >= 500) throw new Error(`${method} ${path} -> ${res.status} ${text}`);
    if (method !== 'HEAD' && res.status !== 204) assertResponseSchema(method, path, res.status, body);
    return { status: res.status, headers: res.headers, text, body };
  };

  return {
    cp,
    url: cp.apiUrl,
    token: cp.adminToken,
    stateDir,
    req,
    async userToken(username, o) {
      const user = await cp.context.auth.createUser(username, o.restricted, grantsOf(o.grants));
      return (await cp.context.auth.issueToken(user.id, { label: `${username}-token`, scopes: o.scopes ?? '*', expiry: null })).secret;
    },
    setGrants(username, g) {
      const id = db.prepare('SELECT id FROM users WHERE username = ?').pluck().get(username) as number;
      db.prepare('UPDATE users SET grants = ? WHERE id = ?').run(JSON.stringify(grantsOf(g)), id);
    },
    snapshot() {
      const all = (sql: string) => db.prepare(sql).all();
      return JSON.stringify({
        nodebalancers: all('SELECT * FROM nodebalancers ORDER BY id'),
        configs: all('SELECT * FROM nb_configs ORDER BY id'),
        nodes: all('SELECT * FROM nb_nodes ORDER BY id'),
        addresses: all('SELECT * FROM addresses ORDER BY ip'),
        tokens: all('SELECT id, user_id, label, scopes, expiry FROM tokens ORDER BY id'),
        users: all('SELECT * FROM users ORDER BY id'),
        events: db.prepare('SELECT COUNT(*) FROM events').pluck().get(),
      });
    },
    async close() {
      await cp.close();
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}

/** The error reasons by field of a 400 body, for compact assertions. */
export function fieldErrors(body: { errors: { field?: string; reason: string }[] }): Record<string, string> {
  return Object.fromEntries(body.errors.map((e) => [e.field ?? '', e.reason]));
}
