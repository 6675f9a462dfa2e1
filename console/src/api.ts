/**
 * The console's only door to Fulcrum: the public /v4 API and /v4/fulcrum/*, same origin, with the
 * person's token from session storage (docs/console.md). The token never goes into a URL the
 * server sees: the lab's link carries it in the fragment, read once here and removed.
 */
const KEY = 'fulcrum.console.token';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly reasons: { reason: string; field?: string }[],
  ) {
    super(reasons.map((r) => (r.field ? `${r.field}: ${r.reason}` : r.reason)).join('; ') || `HTTP ${status}`);
  }
}

type Listener = () => void;
const unauthorizedListeners = new Set<Listener>();

export const session = {
  token(): string | null {
    return sessionStorage.getItem(KEY);
  },
  set(token: string): void {
    sessionStorage.setItem(KEY, token.trim());
  },
  clear(): void {
    sessionStorage.removeItem(KEY);
  },
  /** Takes `#token=...` from the address into session storage and drops it from the address bar. */
  adoptFragment(): boolean {
    const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (!m) return false;
    session.set(decodeURIComponent(m[1]!));
    history.replaceState(null, '', location.pathname + location.search);
    return true;
  },
  onUnauthorized(l: Listener): () => void {
    unauthorizedListeners.add(l);
    return () => unauthorizedListeners.delete(l);
  },
};

export interface Page<T> { data: T[]; page: number; pages: number; results: number }

export async function call<T = any>(method: string, path: string, body?: unknown, extra: Record<string, string> = {}): Promise<T> {
  const res = await request(method, path, body, extra);
  const text = await res.text();
  return (text ? JSON.parse(text) : {}) as T;
}

async function request(method: string, path: string, body?: unknown, extra: Record<string, string> = {}): Promise<Response> {
  const token = session.token();
  const headers: Record<string, string> = { accept: 'application/json', ...extra };
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'omit' });
  if (res.ok) return res;
  let reasons: { reason: string; field?: string }[] = [];
  try {
    reasons = ((await res.json()) as { errors?: { reason: string; field?: string }[] }).errors ?? [];
  } catch {
    reasons = [];
  }
  // 401 is also the answer to a missing scope: only a refused token signs the person out.
  const scopeOnly = reasons.length > 0 && reasons.every((r) => /not authorized to use this endpoint/i.test(r.reason));
  if (res.status === 401 && !scopeOnly) for (const l of unauthorizedListeners) l();
  throw new ApiError(res.status, reasons);
}

/** Every page of a list endpoint (lists here are small: a few hundred entries at most). */
export async function all<T = any>(path: string): Promise<T[]> {
  const out: T[] = [];
  for (let page = 1; ; page++) {
    const sep = path.includes('?') ? '&' : '?';
    const p = await call<Page<T>>('GET', `${path}${sep}page=${page}&page_size=500`);
    out.push(...p.data);
    if (page >= p.pages) return out;
  }
}

export interface Access {
  scopes: string;
  restricted: boolean;
  /** Global grants of a restricted user, when the API returned them. */
  global: Record<string, unknown>;
}

/**
 * What the token may do: its scopes come back in every answer's X-OAuth-Scopes header; a
 * restricted user's grants from /profile/grants (204 for an unrestricted user).
 */
export async function loadAccess(): Promise<Access> {
  const res = await request('GET', '/v4/profile/grants');
  const scopes = res.headers.get('x-oauth-scopes') ?? '';
  const text = res.status === 204 ? '' : await res.text();
  const grants = text ? (JSON.parse(text) as { global?: Record<string, unknown> }) : undefined;
  return { scopes, restricted: grants !== undefined, global: grants?.global ?? {} };
}

export type Area = 'nodebalancers' | 'databases' | 'events' | 'account';

export function canWrite(a: Access | undefined, area: Area): boolean {
  if (!a) return false;
  const ok = a.scopes.split(/[\s,]+/).some((s) => s === '*' || s === `${area}:read_write`);
  if (!ok) return false;
  if (!a.restricted) return true;
  if (area === 'nodebalancers') return a.global.add_nodebalancers === true;
  if (area === 'databases') return a.global.add_databases === true;
  return false;
}

export function canRead(a: Access | undefined, area: Area): boolean {
  if (!a) return false;
  return a.scopes.split(/[\s,]+/).some((s) => s === '*' || s === `${area}:read_only` || s === `${area}:read_write`);
}

export function isAdmin(a: Access | undefined): boolean {
  return !!a && !a.restricted;
}
