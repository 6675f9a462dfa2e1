import { ErrorCollector } from '../../../lib/errors.js';
import { isIpv4OrCidr } from '../../../lib/ipv4.js';
import { checkField, checkFields, checkValue, type Body, type FieldSpec } from '../validation/fields.js';
import { validateEngineConfig } from './engine-config.js';
import { forkReasons, validateFork, type ForkLookups } from './fork-request.js';
import type { DatabaseFork, EngineConfig, ReplicationType, UpdatesWindow } from './model.js';

/**
 * Pure request validation for Managed Databases: every rule is a 400 naming the field, and all
 * violations of one request are reported together. Catalogue lookups are passed in so that the
 * rules stay testable without a store.
 */

/**
 * Every reason text a database request can be refused with. Clients and tests match on these
 * byte for byte: change one only on purpose, together with the inventory in
 * test/unit/api/error-inventory.test.ts.
 */
export const databaseReasons = {
  required: (f: string) => `${f} is required`,
  labelType: 'Label must be a string',
  labelLength: 'Label must be between 3 and 32 characters',
  labelUnique: 'Label must be unique among your databases',
  regionInvalid: 'region is not valid',
  typeInvalid: 'type is not valid; see /databases/types',
  engineUnavailable: (engine: string) => `Engine ${engine} is not available; see /databases/engines for the engines offered`,
  engineNotString: 'engine is not available; see /databases/engines for the engines offered',
  clusterSize: 'cluster_size must be 1 or 3',
  clusterSizeSpread: 'cluster_size cannot be changed while the members run on several hosts',
  replicationType: 'replication_type must be none, asynch or semi_synch',
  replicationForOne: 'replication_type must be none for a cluster_size of 1',
  replicationForThree: 'replication_type must be asynch or semi_synch for a cluster_size of 3',
  trueOrFalse: (f: string) => `${f} must be true or false`,
  allowListArray: 'allow_list must be an array of IPv4 addresses or CIDR ranges',
  allowListMax: (max: number) => `allow_list may have at most ${max} entries`,
  allowListEntry: (entry: string) => `${JSON.stringify(entry)} is not a valid IPv4 address or CIDR range`,
  allowListEntryNotString: 'This entry is not a valid IPv4 address or CIDR range',
  updatesObject: 'updates must be an object',
  frequency: 'frequency must be weekly or monthly',
  integerFromTo: (f: string, lo: number, hi: number) => `${f} must be an integer from ${lo} to ${hi}`,
  weekForWeekly: 'week_of_month must be null for a weekly frequency',
  weekForMonthly: 'week_of_month (1-4) is required for a monthly frequency',
  resizeToMoreDisk: (current: string) => `A database can only be resized to a plan with more disk than ${current}`,
  typeWithAllowList: 'type and allow_list cannot be changed in the same request',
  immutable: (f: string) => `${f} cannot be changed after creation`,
  notYet: (f: string) => `${f} is not supported yet`,
  versionUnavailable: (v: string) => `version ${v} is not available; see /databases/engines for the versions offered`,
  versionDowngrade: (current: string) => `version can only be upgraded from ${current}, not lowered`,
  snapshotLabel: 'label must be 1 to 30 characters of ASCII letters, digits and underscore',
  snapshotLabelTaken: (label: string) => `A backup labelled ${label} already exists for this database`,
  target: 'target must be primary or secondary',
  targetSecondary: 'target secondary needs a cluster_size of 3',
  ...forkReasons,
} as const;

const R = databaseReasons;

export { parseRestoreTime, type ForkSourceView } from './fork-request.js';

const MAX_ALLOW_LIST = 100;

/** The database label; `labelTaken` adds the uniqueness rule. */
function labelSpec(labelTaken: (label: string) => boolean): FieldSpec {
  return {
    null: 'absent',
    type: { is: 'string', reason: R.labelType },
    range: { min: 3, max: 32, reason: R.labelLength },
    check: (v) => (labelTaken(v) ? R.labelUnique : undefined),
  };
}

/** A catalogue reference (region, type): present, a string, and known to `exists`. */
function known(f: string, exists: (id: string) => boolean, reason: string): FieldSpec {
  return { required: R.required(f), null: 'absent', check: (v) => (typeof v === 'string' && exists(v) ? undefined : reason) };
}

const bool = (f: string): FieldSpec => ({ null: 'absent', type: { is: 'boolean', reason: R.trueOrFalse(f) } });

const allowListEntry: FieldSpec = {
  type: { is: 'string', reason: R.allowListEntryNotString },
  check: (v: string) => (isIpv4OrCidr(v) ? undefined : R.allowListEntry(v)),
};

function validateAllowList(errs: ErrorCollector, v: unknown): string[] | undefined {
  if (!Array.isArray(v)) {
    errs.add('allow_list', R.allowListArray);
    return undefined;
  }
  if (v.length > MAX_ALLOW_LIST) {
    errs.add('allow_list', R.allowListMax(MAX_ALLOW_LIST));
    return undefined;
  }
  const before = errs.errors.length;
  v.forEach((x, i) => checkValue(errs, `allow_list[${i}]`, x, allowListEntry));
  return errs.errors.length === before ? (v as string[]) : undefined;
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
  engineConfig: EngineConfig;
  /** A fork: the source and the restore second (ms, UTC). */
  fork?: DatabaseFork;
}

export interface CreateLookups extends ForkLookups {
  engineExists(id: string): boolean;
  regionExists(id: string): boolean;
  typeExists(id: string): boolean;
  labelTaken(label: string): boolean;
}

export function validateCreate(body: Body, look: CreateLookups): CreateInput {
  const errs = new ErrorCollector();
  const label = checkField<string>(errs, body, 'label', { ...labelSpec(look.labelTaken), required: R.required('label') });
  const region = checkField<string>(errs, body, 'region', known('region', look.regionExists, R.regionInvalid));
  const type = checkField<string>(errs, body, 'type', known('type', look.typeExists, R.typeInvalid));
  const engineId = checkField<string>(errs, body, 'engine', {
    required: R.required('engine'),
    null: 'absent',
    check: (v) => (typeof v !== 'string' ? R.engineNotString : look.engineExists(v) ? undefined : R.engineUnavailable(v)),
  });

  const clusterSize = checkField<1 | 3>(errs, body, 'cluster_size', { null: 'absent', oneOf: { values: [1, 3], reason: R.clusterSize } }) ?? 1;
  // The replication rules below hold only against a valid (or defaulted) size.
  const sizeOk = body.cluster_size === undefined || body.cluster_size === null || body.cluster_size === 1 || body.cluster_size === 3;
  const replicationType = checkField<ReplicationType>(errs, body, 'replication_type', {
    null: 'absent',
    oneOf: { values: ['none', 'asynch', 'semi_synch'], reason: R.replicationType },
    check: (rt) => {
      if (sizeOk && clusterSize === 1 && rt !== 'none') return R.replicationForOne;
      if (sizeOk && clusterSize === 3 && rt === 'none') return R.replicationForThree;
      return undefined;
    },
  }) ?? (clusterSize === 3 ? 'semi_synch' : 'none');
  const encrypted = checkField<boolean>(errs, body, 'encrypted', bool('encrypted')) ?? false;
  const sslConnection = checkField<boolean>(errs, body, 'ssl_connection', bool('ssl_connection')) ?? true;
  let allowList: string[] = [];
  if (body.allow_list !== undefined && body.allow_list !== null) allowList = validateAllowList(errs, body.allow_list) ?? [];
  let updates: UpdatesWindow | undefined;
  if (body.updates !== undefined && body.updates !== null) updates = validateUpdates(errs, body.updates, defaultUpdates());
  refuseNotYet(errs, body);
  let engineConfig: EngineConfig = {};
  if (body.engine_config !== undefined && body.engine_config !== null) engineConfig = validateEngineConfig(errs, body.engine_config, {}) ?? {};
  const fork = body.fork === undefined || body.fork === null ? undefined : validateFork(errs, body.fork, engineId, look);
  errs.throwIfAny();
  return { label: label!, region: region!, type: type!, engineId: engineId!, clusterSize, replicationType, encrypted, sslConnection, allowList, updates, engineConfig, fork };
}

/**
 * The window a new database gets: as observed right after a real create, except that the day is
 * Sunday (7) from the start: day_of_week is an integer, only week_of_month may be null, so the real
 * service's early null is not copied (docs/databases.md).
 */
export function defaultUpdates(): UpdatesWindow {
  return { frequency: 'weekly', duration: 3, hour_of_day: 0, day_of_week: 7, week_of_month: null };
}

/** An integer field of `updates`; the type and the range share one reason. */
function intIn(f: string, lo: number, hi: number): FieldSpec {
  const reason = R.integerFromTo(f, lo, hi);
  return { type: { is: 'integer', reason }, range: { min: lo, max: hi, reason } };
}

const updatesSpecs = {
  frequency: { oneOf: { values: ['weekly', 'monthly'], reason: R.frequency } },
  // 4 hours is what today's platform defaults to and its clients send (docs/databases.md).
  duration: intIn('duration', 1, 4),
  hour_of_day: intIn('hour_of_day', 0, 23),
  // Not nullable, unlike week_of_month (docs/databases.md).
  day_of_week: intIn('day_of_week', 1, 7),
  week_of_month: { ...intIn('week_of_month', 1, 4), null: 'value' },
} satisfies Record<string, FieldSpec>;

/**
 * The `updates` object, merged over the current window: frequency weekly|monthly, duration 1-4
 * (hours), hour_of_day 0-23 (UTC), day_of_week 1-7 (Monday 1, never null), week_of_month 1-4 for monthly and
 * null for weekly. Switching to weekly without naming week_of_month clears it.
 */
export function validateUpdates(errs: ErrorCollector, v: unknown, current: UpdatesWindow): UpdatesWindow | undefined {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) {
    errs.add('updates', R.updatesObject);
    return undefined;
  }
  const u = v as Body;
  const before = errs.errors.length;
  const out: UpdatesWindow = { ...current };
  const got = checkFields(errs, u, updatesSpecs, 'updates');
  if (got.frequency !== undefined) {
    out.frequency = got.frequency as UpdatesWindow['frequency'];
    if (out.frequency === 'weekly' && u.week_of_month === undefined) out.week_of_month = null;
  }
  if (got.duration !== undefined) out.duration = got.duration as number;
  if (got.hour_of_day !== undefined) out.hour_of_day = got.hour_of_day as number;
  if (got.day_of_week !== undefined) out.day_of_week = got.day_of_week as number;
  if (got.week_of_month !== undefined) out.week_of_month = got.week_of_month as number | null;
  if (errs.errors.length === before) {
    if (out.frequency === 'weekly' && out.week_of_month !== null) errs.add('updates.week_of_month', R.weekForWeekly);
    if (out.frequency === 'monthly' && out.week_of_month === null) errs.add('updates.week_of_month', R.weekForMonthly);
  }
  return errs.errors.length === before ? out : undefined;
}

export interface UpdateInput {
  label?: string;
  allowList?: string[];
  updates?: UpdatesWindow;
  type?: string;
  engineConfig?: EngineConfig;
  /** An upgrade: the catalogue engine id of the newer version. */
  engineId?: string;
  /** A scale to this many nodes (1 <-> 3). */
  clusterSize?: 1 | 3;
}

export interface UpdateLookups {
  labelTaken(label: string): boolean;
  /** Disk (MB) of a type, undefined when the type does not exist. */
  typeDisk(id: string): number | undefined;
  currentType: string;
  currentUpdates: UpdatesWindow;
  currentEngineConfig?: EngineConfig;
  currentClusterSize?: number;
  currentVersion?: string;
  /** The database's own engine id: a version naming it (a series like `10.11`) is no change. */
  currentEngineId?: string;
  /**
   * The catalogue engine id offering this MySQL version (a full version, or a series such as
   * `11.8` for the newest build of it), undefined when none does.
   */
  engineForVersion?(version: string): string | undefined;
  /** The members run on more than one agent (a scale is then refused). */
  spansAgents?: boolean;
  /** Whether the agents running the database can run that engine (absent: yes). */
  engineUsable?(engineId: string): boolean;
}

/**
 * Newer request fields Fulcrum does not serve yet: refused by name rather than ignored, so a
 * private network is never silently a public one. null (what clients send for "none") is accepted.
 */
function refuseNotYet(errs: ErrorCollector, body: Body): void {
  for (const f of ['private_network']) if (body[f] !== undefined && body[f] !== null) errs.add(f, R.notYet(f));
}

/** Dotted versions compared number by number (10.11.9 < 10.11.14). */
export function compareVersions(a: string, b: string): number {
  const x = a.split('.').map(Number);
  const y = b.split('.').map(Number);
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  return 0;
}

/**
 * `version` and `cluster_size` as today's clients send them: the current value (Terraform and
 * linodego send what they hold) is no change; a newer catalogue version is an upgrade; the other
 * size (1 <-> 3) is a scale.
 */
function validateResizeAndUpgrade(errs: ErrorCollector, body: Body, look: UpdateLookups, out: UpdateInput): void {
  if (body.cluster_size !== undefined && body.cluster_size !== null) {
    if (body.cluster_size !== 1 && body.cluster_size !== 3) errs.add('cluster_size', R.clusterSize);
    else if (body.cluster_size !== look.currentClusterSize && look.spansAgents) errs.add('cluster_size', R.clusterSizeSpread);
    else if (body.cluster_size !== look.currentClusterSize) out.clusterSize = body.cluster_size;
  }
  if (body.version !== undefined && body.version !== null && body.version !== look.currentVersion) {
    const v = body.version;
    const engineId = typeof v === 'string' ? look.engineForVersion?.(v) : undefined;
    if (typeof v !== 'string' || !engineId) errs.add('version', R.versionUnavailable(String(v)));
    else if (engineId === look.currentEngineId) return;
    else if (compareVersions(v, look.currentVersion ?? '0') < 0) errs.add('version', R.versionDowngrade(look.currentVersion ?? ''));
    else if (look.engineUsable && !look.engineUsable(engineId)) errs.add('version', R.versionUnavailable(v));
    else out.engineId = engineId;
  }
}

export function validateUpdate(body: Body, look: UpdateLookups): UpdateInput {
  const errs = new ErrorCollector();
  const out: UpdateInput = {};
  const label = checkField<string>(errs, body, 'label', labelSpec(look.labelTaken));
  if (label !== undefined) out.label = label;
  if (body.allow_list !== undefined && body.allow_list !== null) out.allowList = validateAllowList(errs, body.allow_list);
  if (body.updates !== undefined && body.updates !== null) out.updates = validateUpdates(errs, body.updates, look.currentUpdates);
  if (body.engine_config !== undefined && body.engine_config !== null) out.engineConfig = validateEngineConfig(errs, body.engine_config, look.currentEngineConfig ?? {});
  if (body.type !== undefined && body.type !== null) {
    const disk = typeof body.type === 'string' ? look.typeDisk(body.type) : undefined;
    const currentDisk = look.typeDisk(look.currentType) ?? 0;
    if (disk === undefined) errs.add('type', R.typeInvalid);
    else if (body.type !== look.currentType && disk <= currentDisk) errs.add('type', R.resizeToMoreDisk(look.currentType));
    else if (body.type !== look.currentType) out.type = body.type as string;
    if (body.allow_list !== undefined && body.allow_list !== null && body.type !== look.currentType) errs.add('type', R.typeWithAllowList);
  }
  validateResizeAndUpgrade(errs, body, look, out);
  refuseNotYet(errs, body);
  for (const k of ['engine', 'region', 'replication_type', 'encrypted', 'ssl_connection']) {
    if (body[k] !== undefined) errs.add(k, R.immutable(k));
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
  const label = checkField<string>(errs, body, 'label', {
    required: R.required('label'),
    null: 'absent',
    type: { is: 'string', reason: R.snapshotLabel },
    pattern: { re: /^[A-Za-z0-9_]{1,30}$/, reason: R.snapshotLabel },
    check: (v) => (look.labelTaken(v) ? R.snapshotLabelTaken(v) : undefined),
  });
  const target = checkField<SnapshotInput['target']>(errs, body, 'target', {
    null: 'absent',
    oneOf: { values: ['primary', 'secondary'], reason: R.target },
    check: (v) => (v === 'secondary' && look.clusterSize === 1 ? R.targetSecondary : undefined),
  }) ?? 'primary';
  errs.throwIfAny();
  return { label: label!, target };
}
