/**
 * What the Fleet page shows of an agent host, read defensively from GET /v4/fulcrum/agents
 * (docs/console.md, "Fleet"): fields missing from an older control plane, spelled in camelCase or
 * snake_case, or added later (a drain's progress) must neither break the page nor be guessed at.
 * No DOM here: the page renders these values as text, and the unit test reads them directly.
 */

export interface HostMemberRow {
  databaseId: number | null;
  label: string;
  member: number | null;
  role: string;
  /** The member's reported state; '' before its agent reported it. */
  status: string;
}

export interface HostEventRow {
  id: number | string;
  created: string;
  action: string;
  status: string;
  entity: string;
  message: string;
}

export interface HostRow {
  id: string;
  region: string;
  /** up | unreachable | lost (or whatever newer state the API says); '' when it says none. */
  state: string;
  connected: boolean;
  draining: boolean;
  /** A drain's progress in words ('' when the API says nothing more than that it drains). */
  drain: string;
  appliedVersion: string;
  lastSeen: number | string | null;
  lastError: string;
  members: HostMemberRow[];
  events: HostEventRow[];
}

type Raw = Record<string, unknown>;

const pick = (raw: Raw, ...keys: string[]): unknown => {
  for (const k of keys) if (raw[k] !== undefined && raw[k] !== null) return raw[k];
  return undefined;
};
const text = (v: unknown): string => (typeof v === 'string' ? v : typeof v === 'number' || typeof v === 'boolean' ? String(v) : '');
const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const obj = (v: unknown): Raw => (v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Raw) : {});
const list = (v: unknown): Raw[] => (Array.isArray(v) ? v.map(obj) : []);

/** At most this many facts of a drain object are written out (a hostile or huge object stays short). */
const DRAIN_FACTS = 6;

/**
 * A drain as the API may give it: `draining: true`, `state: "draining"`, `drain: "text"`, or
 * `drain: {...}` with its progress (every plain field written out as "key value", in order).
 */
function drainOf(raw: Raw, state: string): { draining: boolean; drain: string } {
  const d = pick(raw, 'drain', 'draining');
  if (d === false) return { draining: state === 'draining', drain: '' };
  if (d === true) return { draining: true, drain: '' };
  if (typeof d === 'string' || typeof d === 'number') return { draining: true, drain: String(d) };
  if (d !== undefined && typeof d === 'object' && !Array.isArray(d)) {
    const facts = Object.entries(d as Raw)
      .filter(([, v]) => typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean')
      .slice(0, DRAIN_FACTS)
      .map(([k, v]) => `${k.replace(/_/g, ' ').replace(/([a-z])([A-Z])/g, '$1 $2').toLowerCase()} ${String(v)}`);
    return { draining: true, drain: facts.join(', ') };
  }
  return { draining: state === 'draining', drain: '' };
}

export function hostRow(input: unknown): HostRow {
  const raw = obj(input);
  const state = text(raw.state);
  return {
    id: text(raw.id),
    region: text(raw.region),
    state,
    connected: raw.connected === true,
    ...drainOf(raw, state),
    appliedVersion: text(pick(raw, 'appliedVersion', 'applied_version', 'versionApplied', 'version_applied')),
    lastSeen: (pick(raw, 'lastSeen', 'last_seen') as number | string | undefined) ?? null,
    lastError: text(pick(raw, 'lastError', 'last_error')),
    members: list(raw.members).map((m) => ({
      databaseId: num(pick(m, 'databaseId', 'database_id')),
      label: text(m.label),
      member: num(pick(m, 'member', 'index')),
      role: text(m.role),
      status: text(pick(m, 'status', 'state')),
    })),
    events: list(pick(raw, 'recentEvents', 'recent_events', 'events')).map((e) => ({
      id: typeof e.id === 'number' || typeof e.id === 'string' ? e.id : '',
      created: text(e.created),
      action: text(e.action),
      status: text(e.status),
      entity: (() => { const x = obj(e.entity); return x.label === undefined ? '' : `${text(x.type)} ${text(x.label)}`.trim(); })(),
      message: text(e.message),
    })),
  };
}
