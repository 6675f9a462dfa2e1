import { ErrorCollector } from '../../../lib/errors.js';
import type { ReplicationType, UpdatesWindow } from './model.js';

/**
 * Pure request validation for Managed Databases: every rule is a 400 naming the field, and all
 * violations of one request are reported together. Catalogue lookups are passed in so that the
 * rules stay testable without a store.
 */
type Body = Record<string, unknown>;

const CIDR = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?:\/(\d{1,2}))?$/;

/** A single IPv4 address or CIDR (the SPEC pattern, with octets 0-255 and prefix 0-32). */
export function isIpv4OrCidr(s: string): boolean {
  const m = CIDR.exec(s);
  if (!m) return false;
  for (let i = 1; i <= 4; i++) if (Number(m[i]) > 255 || (m[i]!.length > 1 && m[i]!.startsWith('0'))) return false;
  return m[5] === undefined || Number(m[5]) <= 32;
}

export function validateLabel(errs: ErrorCollector, v: unknown, field = 'label'): string | undefined {
  if (typeof v !== 'string') {
    errs.add(field, 'Label must be a string');
    return undefined;
  }
  if (v.length < 3 || v.length > 32) {
    errs.add(field, 'Label must be between 3 and 32 characters');
    return undefined;
  }
  return v;
}

export const MAX_ALLOW_LIST = 100;

export function validateAllowList(errs: ErrorCollector, v: unknown): string[] | undefined {
  if (!Array.isArray(v)) {
    errs.add('allow_list', 'allow_list must be an array of IPv4 addresses or CIDR ranges');
    return undefined;
  }
  if (v.length > MAX_ALLOW_LIST) {
    errs.add('allow_list', `allow_list may have at most ${MAX_ALLOW_LIST} entries`);
    return undefined;
  }
  let ok = true;
  v.forEach((x, i) => {
    if (typeof x !== 'string' || !isIpv4OrCidr(x)) {
      errs.add(`allow_list[${i}]`, `${typeof x === 'string' ? JSON.stringify(x) : 'This entry'} is not a valid IPv4 address or CIDR range`);
      ok = false;
    }
  });
  return ok ? (v as string[]) : undefined;
}

export interface CreateInput {
  label: string;
  region: string;
  type: string;
  engineId: string;
  clusterSize: 1 | 3;
  replicationType: ReplicationType;
  encrypted: boolean;
  sslConnection: boolean;
  allowList: string[];
  updates?: UpdatesWindow;
}

export interface CreateLookups {
  engineExists(id: string): boolean;
  regionExists(id: string): boolean;
  typeExists(id: string): boolean;
  labelTaken(label: string): boolean;
}

function bool(errs: ErrorCollector, body: Body, field: string, dflt: boolean): boolean {
  const v = body[field];
  if (v === undefined || v === null) return dflt;
  if (typeof v !== 'boolean') {
    errs.add(field, `${field} must be true or false`);
    return dflt;
  }
  return v;
}

export function validateCreate(body: Body, look: CreateLookups): CreateInput {
  const errs = new ErrorCollector();
  let label: string | undefined;
  if (body.label === undefined || body.label === null) errs.add('label', 'label is required');
  else {
    label = validateLabel(errs, body.label);
    if (label && look.labelTaken(label)) errs.add('label', 'Label must be unique among your databases');
  }
  if (body.region === undefined || body.region === null) errs.add('region', 'region is required');
  else if (typeof body.region !== 'string' || !look.regionExists(body.region)) errs.add('region', 'region is not valid');
  if (body.type === undefined || body.type === null) errs.add('type', 'type is required');
  else if (typeof body.type !== 'string' || !look.typeExists(body.type)) errs.add('type', 'type is not valid; see /databases/types');
  if (body.engine === undefined || body.engine === null) errs.add('engine', 'engine is required');
  else if (typeof body.engine !== 'string' || !look.engineExists(body.engine)) {
    errs.add('engine', `${typeof body.engine === 'string' ? `Engine ${body.engine}` : 'engine'} is not available; see /databases/engines for the engines offered`);
  }

  let clusterSize: 1 | 3 = 1;
  if (body.cluster_size !== undefined && body.cluster_size !== null) {
    if (body.cluster_size !== 1 && body.cluster_size !== 3) errs.add('cluster_size', 'cluster_size must be 1 or 3');
    else clusterSize = body.cluster_size;
  }
  const sizeOk = body.cluster_size === undefined || body.cluster_size === null || body.cluster_size === 1 || body.cluster_size === 3;
  let replicationType: ReplicationType = clusterSize === 3 ? 'semi_synch' : 'none';
  const rt = body.replication_type;
  if (rt !== undefined && rt !== null) {
    if (rt !== 'none' && rt !== 'asynch' && rt !== 'semi_synch') errs.add('replication_type', 'replication_type must be none, asynch or semi_synch');
    else if (sizeOk && clusterSize === 1 && rt !== 'none') errs.add('replication_type', 'replication_type must be none for a cluster_size of 1');
    else if (sizeOk && clusterSize === 3 && rt === 'none') errs.add('replication_type', 'replication_type must be asynch or semi_synch for a cluster_size of 3');
    else replicationType = rt;
  }
  const encrypted = bool(errs, body, 'encrypted', false);
  const sslConnection = bool(errs, body, 'ssl_connection', true);
  let allowList: string[] = [];
  if (body.allow_list !== undefined && body.allow_list !== null) allowList = validateAllowList(errs, body.allow_list) ?? [];
  let updates: UpdatesWindow | undefined;
  if (body.updates !== undefined && body.updates !== null) updates = validateUpdates(errs, body.updates, defaultUpdates());
  errs.throwIfAny();
  return {
    label: label!, region: body.region as string, type: body.type as string, engineId: body.engine as string,
    clusterSize, replicationType, encrypted, sslConnection, allowList, updates,
  };
}

/**
 * The window a new database gets: as observed right after a real create, except that the day is
 * Sunday (7) from the start. The spec (2.3) types day_of_week as an integer (only week_of_month
 * may be null), so the real service's early null is not copied.
 */
export function defaultUpdates(): UpdatesWindow {
  return { frequency: 'weekly', duration: 3, hour_of_day: 0, day_of_week: 7, week_of_month: null };
}

function intIn(errs: ErrorCollector, field: string, v: unknown, lo: number, hi: number): number | undefined {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) {
    errs.add(field, `${field.replace('updates.', '')} must be an integer from ${lo} to ${hi}`);
    return undefined;
  }
  return v;
}

/**
 * The `updates` object, merged over the current window: frequency weekly|monthly, duration 1-3
 * (hours), hour_of_day 0-23 (UTC), day_of_week 1-7 (Monday 1, never null), week_of_month 1-4 for monthly and
 * null for weekly. Switching to weekly without naming week_of_month clears it.
 */
export function validateUpdates(errs: ErrorCollector, v: unknown, current: UpdatesWindow): UpdatesWindow | undefined {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) {
    errs.add('updates', 'updates must be an object');
    return undefined;
  }
  const u = v as Body;
  const before = errs.errors.length;
  const out: UpdatesWindow = { ...current };
  if (u.frequency !== undefined) {
    if (u.frequency !== 'weekly' && u.frequency !== 'monthly') errs.add('updates.frequency', 'frequency must be weekly or monthly');
    else {
      out.frequency = u.frequency;
      if (u.frequency === 'weekly' && u.week_of_month === undefined) out.week_of_month = null;
    }
  }
  if (u.duration !== undefined) out.duration = intIn(errs, 'updates.duration', u.duration, 1, 3) ?? out.duration;
  if (u.hour_of_day !== undefined) out.hour_of_day = intIn(errs, 'updates.hour_of_day', u.hour_of_day, 0, 23) ?? out.hour_of_day;
  if (u.day_of_week !== undefined) {
    // Not nullable (spec 2.3 types it as an integer, unlike week_of_month).
    out.day_of_week = intIn(errs, 'updates.day_of_week', u.day_of_week, 1, 7) ?? out.day_of_week;
  }
  if (u.week_of_month !== undefined) {
    out.week_of_month = u.week_of_month === null ? null : intIn(errs, 'updates.week_of_month', u.week_of_month, 1, 4) ?? out.week_of_month;
  }
  if (errs.errors.length === before) {
    if (out.frequency === 'weekly' && out.week_of_month !== null) errs.add('updates.week_of_month', 'week_of_month must be null for a weekly frequency');
    if (out.frequency === 'monthly' && out.week_of_month === null) errs.add('updates.week_of_month', 'week_of_month (1-4) is required for a monthly frequency');
  }
  return errs.errors.length === before ? out : undefined;
}

export interface UpdateInput {
  label?: string;
  allowList?: string[];
  updates?: UpdatesWindow;
  type?: string;
}

export interface UpdateLookups {
  labelTaken(label: string): boolean;
  /** Disk (MB) of a type, undefined when the type does not exist. */
  typeDisk(id: string): number | undefined;
  currentType: string;
  currentUpdates: UpdatesWindow;
}

export function validateUpdate(body: Body, look: UpdateLookups): UpdateInput {
  const errs = new ErrorCollector();
  const out: UpdateInput = {};
  if (body.label !== undefined && body.label !== null) {
    const label = validateLabel(errs, body.label);
    if (label && look.labelTaken(label)) errs.add('label', 'Label must be unique among your databases');
    out.label = label;
  }
  if (body.allow_list !== undefined && body.allow_list !== null) out.allowList = validateAllowList(errs, body.allow_list);
  if (body.updates !== undefined && body.updates !== null) out.updates = validateUpdates(errs, body.updates, look.currentUpdates);
  if (body.type !== undefined && body.type !== null) {
    const disk = typeof body.type === 'string' ? look.typeDisk(body.type) : undefined;
    const currentDisk = look.typeDisk(look.currentType) ?? 0;
    if (disk === undefined) errs.add('type', 'type is not valid; see /databases/types');
    else if (body.type !== look.currentType && disk <= currentDisk) {
      errs.add('type', `A database can only be resized to a plan with more disk than ${look.currentType}`);
    } else if (body.type !== look.currentType) out.type = body.type as string;
    if (body.allow_list !== undefined && body.allow_list !== null && body.type !== look.currentType) {
      errs.add('type', 'type and allow_list cannot be changed in the same request');
    }
  }
  for (const k of ['engine', 'region', 'cluster_size', 'replication_type', 'encrypted', 'ssl_connection']) {
    if (body[k] !== undefined) errs.add(k, `${k} cannot be changed after creation`);
  }
  errs.throwIfAny();
  return out;
}

export interface SnapshotInput {
  label: string;
  target: 'primary' | 'secondary';
}

/** Snapshot label: 1-30 ASCII letters, digits and underscore; target primary|secondary. */
export function validateSnapshot(body: Body, look: { labelTaken(label: string): boolean; clusterSize: number }): SnapshotInput {
  const errs = new ErrorCollector();
  const label = body.label;
  if (label === undefined || label === null) errs.add('label', 'label is required');
  else if (typeof label !== 'string' || !/^[A-Za-z0-9_]{1,30}$/.test(label)) {
    errs.add('label', 'label must be 1 to 30 characters of ASCII letters, digits and underscore');
  } else if (look.labelTaken(label)) errs.add('label', `A backup labelled ${label} already exists for this database`);
  let target: 'primary' | 'secondary' = 'primary';
  if (body.target !== undefined && body.target !== null) {
    if (body.target !== 'primary' && body.target !== 'secondary') errs.add('target', 'target must be primary or secondary');
    else if (body.target === 'secondary' && look.clusterSize === 1) errs.add('target', 'target secondary needs a cluster_size of 3');
    else target = body.target;
  }
  errs.throwIfAny();
  return { label: label as string, target };
}
