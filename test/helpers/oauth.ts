import { createHash, randomBytes } from 'node:crypto';
import type { ApiHarness } from './api-harness.js';

/**
 * Drives the install's OAuth login (/login, docs/security/api.md "OAuth login") the way a browser
 * would, with fetch: opens the sign-in page, posts its form back with the CSRF cookie it set,
 * and exchanges codes at /login/oauth/token.
 */

export function pkce(): { verifier: string; challenge: string } {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

/** Registers a client through /account/oauth-clients as the admin; its secret is '' when public. */
export async function registerClient(api: ApiHarness, body: Record<string, unknown>): Promise<{ id: string; secret: string }> {
  const r = await api.req('POST', '/v4/account/oauth-clients', { body });
  if (r.status !== 200) throw new Error(`register client: ${r.status} ${r.text}`);
  return { id: r.body.id, secret: r.body.secret };
}

const unescape = (s: string) => s.replace(/&#(\d+);/g, (_m, n: string) => String.fromCharCode(Number(n)));

export interface SignInPage {
  status: number;
  html: string;
  /** The CSRF cookie's value, when the page set one. */
  cookie: string | undefined;
  /** The form's hidden fields (csrf_token included). */
  fields: Record<string, string>;
  location: string | null;
}

export async function openSignIn(url: string, params: Record<string, string>): Promise<SignInPage> {
  const r = await fetch(`${url}/login/oauth/authorize?${new URLSearchParams(params)}`, { redirect: 'manual' });
  const html = await r.text();
  const cookie = /fulcrum_login_csrf=([0-9a-f]*)/.exec(r.headers.get('set-cookie') ?? '')?.[1];
  const fields: Record<string, string> = {};
  for (const m of html.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)) fields[m[1]!] = unescape(m[2]!);
  return { status: r.status, html, cookie, fields, location: r.headers.get('location') };
}

/** Posts a sign-in form; `cookie` null sends none (a form posted from another site). */
export async function postSignIn(url: string, fields: Record<string, string>, cookie: string | null): Promise<{ status: number; location: string | null; html: string }> {
  const r = await fetch(`${url}/login/oauth/authorize`, {
    method: 'POST', redirect: 'manual', body: new URLSearchParams(fields),
    headers: cookie === null ? {} : { cookie: `fulcrum_login_csrf=${cookie}` },
  });
  return { status: r.status, location: r.headers.get('location'), html: await r.text() };
}

/** Opens the page and signs in with `token`; the redirect the browser would follow. */
export async function signIn(url: string, params: Record<string, string>, token: string): Promise<string> {
  const p = await openSignIn(url, params);
  if (p.status !== 200 || !p.cookie) throw new Error(`sign-in page: ${p.status} ${p.location ?? p.html.slice(0, 300)}`);
  const r = await postSignIn(url, { ...p.fields, token }, p.cookie);
  if (r.status !== 303 || !r.location) throw new Error(`sign-in: ${r.status} ${r.html.slice(0, 300)}`);
  return r.location;
}

/** POST /login/oauth/token as multipart (Cloud Manager) or form-urlencoded. */
export async function tokenRequest(url: string, fields: Record<string, string>, as: 'multipart' | 'form' = 'multipart', headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  let body: FormData | URLSearchParams;
  if (as === 'multipart') {
    body = new FormData();
    for (const [k, v] of Object.entries(fields)) body.append(k, v);
  } else body = new URLSearchParams(fields);
  const r = await fetch(`${url}/login/oauth/token`, { method: 'POST', body, headers });
  return { status: r.status, body: await r.json() };
}
