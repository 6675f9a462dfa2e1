/**
 * OAuth-style scopes: a space-separated list of `<area>:read_only|read_write`, or `*` for all.
 * read_write implies read_only. Areas follow the real API's list.
 */
const scopeAreas = [
  'account', 'databases', 'domains', 'events', 'firewall', 'images', 'ips', 'linodes', 'lke', 'longview',
  'nodebalancers', 'object_storage', 'stackscripts', 'volumes', 'vpc',
] as const;

export type Access = 'read_only' | 'read_write';

export interface RequiredScope {
  area: string;
  access: Access;
}

export function parseRequired(s: string): RequiredScope {
  const [area, access] = s.split(':');
  return { area: area!, access: access as Access };
}

/** Returns an error message when `scopes` is not a well-formed scope string, else undefined. */
export function validateScopes(scopes: string): string | undefined {
  const parts = scopes.trim().split(/[\s,]+/).filter(Boolean);
  if (parts.length === 0) return 'scopes must not be empty';
  for (const p of parts) {
    if (p === '*') continue;
    const [area, access] = p.split(':');
    if (!scopeAreas.includes(area as (typeof scopeAreas)[number]) || (access !== 'read_only' && access !== 'read_write')) {
      return `Invalid scope ${p}`;
    }
  }
  return undefined;
}

export function normaliseScopes(scopes: string): string {
  const parts = scopes.trim().split(/[\s,]+/).filter(Boolean);
  return parts.includes('*') ? '*' : parts.join(' ');
}

export function hasScope(scopes: string, required: RequiredScope): boolean {
  for (const p of scopes.split(/\s+/)) {
    if (p === '*') return true;
    const [area, access] = p.split(':');
    if (area !== required.area) continue;
    if (access === 'read_write' || (access === 'read_only' && required.access === 'read_only')) return true;
  }
  return false;
}
