import { ErrorCollector } from '../../../lib/errors.js';
import type { Body } from '../validation/fields.js';
import type { EngineConfig } from './model.js';

/**
 * `engine_config` of MySQL databases (docs/databases.md, "engine_config"): the keys today's clients
 * know, with the limits those clients enforce, checked here and translated into MariaDB 10.11
 * server variables for the agent. A key MariaDB cannot honour is refused by name with the reason,
 * never accepted and ignored. `requires_restart` says what our servers need: a static variable is
 * written into the server configuration and rolled out with a restart, a dynamic one is set live.
 */
type KeyType = 'integer' | 'string' | 'boolean';

export interface ConfigKey {
  type: KeyType;
  description: string;
  example: number | string | boolean;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: RegExp;
  enum?: string[];
  /** Described as `["null", <type>]`, as the real service describes the stopword table (null clears it). */
  nullable?: boolean;
  requiresRestart: boolean;
  /** The MariaDB server variable it sets (default: the key itself). */
  variable?: string;
  /** How the value is written for the server (default: as is; booleans as ON/OFF). */
  serverValue?: (v: unknown) => string;
}

const int = (description: string, minimum: number, maximum: number, example: number, requiresRestart = false): ConfigKey =>
  ({ type: 'integer', description, minimum, maximum, example, requiresRestart });
const bool = (description: string, example: boolean, requiresRestart: boolean, variable?: string): ConfigKey =>
  ({ type: 'boolean', description, example, requiresRestart, variable });

/** The `mysql.*` keys MariaDB 10.11 honours. */
export const mysqlConfigKeys: Record<string, ConfigKey> = {
  connect_timeout: int('Seconds the server waits for a connect packet before it answers Bad handshake.', 2, 3600, 10),
  default_time_zone: {
    type: 'string', description: 'The server time zone as an offset from UTC (-12:00 to +14:00) or SYSTEM. Named zones are not offered: the servers carry no time zone tables.',
    example: '+03:00', minLength: 2, maxLength: 100, pattern: /^(SYSTEM|[+-](0\d|1[0-4]):[0-5]\d)$/, requiresRestart: false, variable: 'time_zone',
  },
  // An integer, as the real service describes it (linodego decodes it as a float: the maximum is past int64).
  group_concat_max_len: int('Largest result, in bytes, GROUP_CONCAT() returns.', 4, 18446744073709551615, 1024),
  innodb_change_buffer_max_size: int('Largest share of the buffer pool, in percent, the InnoDB change buffer may take.', 0, 50, 25),
  innodb_flush_neighbors: int('Whether flushing a page also flushes its dirty neighbours: 0 none, 1 contiguous, 2 the whole extent.', 0, 2, 1),
  innodb_ft_min_token_size: int('Shortest word, in characters, stored in an InnoDB FULLTEXT index.', 0, 16, 3, true),
  innodb_ft_server_stopword_table: {
    type: 'string', description: 'The table (db_name/table_name) holding the stopwords of every InnoDB FULLTEXT index; it must exist when set.',
    example: 'db_name/table_name', maxLength: 1024, pattern: /^[A-Za-z0-9_$]+\/[A-Za-z0-9_$]+$/, nullable: true, requiresRestart: false,
  },
  innodb_lock_wait_timeout: int('Seconds an InnoDB transaction waits for a row lock before it gives up.', 1, 3600, 50),
  innodb_log_buffer_size: int('Size in bytes of the buffer InnoDB writes its log through.', 1048576, 4294967295, 16777216, true),
  innodb_online_alter_log_max_size: int('Largest size in bytes of the temporary log of an online InnoDB DDL.', 65536, 1099511627776, 134217728),
  innodb_read_io_threads: int('InnoDB read I/O threads.', 1, 64, 4),
  innodb_rollback_on_timeout: bool('When on, a lock wait timeout rolls back the whole transaction, not only the statement.', true, true),
  innodb_write_io_threads: int('InnoDB write I/O threads.', 1, 64, 4),
  interactive_timeout: int('Seconds an idle interactive connection is kept.', 30, 604800, 3600),
  max_allowed_packet: int('Largest packet or generated string, in bytes, the server accepts.', 102400, 1073741824, 67108864),
  max_heap_table_size: int('Largest size in bytes of a MEMORY table (set tmp_table_size with it).', 1048576, 1073741824, 16777216),
  net_buffer_length: int('Initial size in bytes of each connection and result buffer.', 1024, 1048576, 16384),
  net_read_timeout: int('Seconds to wait for more data from a connection before the read is aborted.', 1, 3600, 30),
  net_write_timeout: int('Seconds to wait for a block to be written to a connection before the write is aborted.', 1, 3600, 60),
  sort_buffer_size: int('Sort buffer size in bytes for ORDER BY and GROUP BY.', 32768, 1073741824, 262144),
  sql_mode: {
    type: 'string', description: 'The global SQL mode, a comma-separated list of MariaDB modes; empty for the server default.',
    example: 'ANSI,TRADITIONAL', maxLength: 1024, pattern: /^[A-Z_0-9]*(,[A-Z_0-9]+)*$/, requiresRestart: false,
  },
  // MariaDB has no sql_require_primary_key; innodb_force_primary_key refuses the same tables
  // (InnoDB ones, the only engine whose data is replicated and backed up consistently).
  sql_require_primary_key: bool('Refuse new or altered tables without a primary key.', true, false, 'innodb_force_primary_key'),
  tmp_table_size: int('Largest in-memory internal temporary table, in bytes (set max_heap_table_size with it).', 1048576, 1073741824, 16777216),
  wait_timeout: int('Seconds an idle non-interactive connection is kept.', 1, 2147483, 28800),
};

/** Keys today's clients know that MariaDB 10.11 cannot honour, with why (the 400 says it). */
export const refusedConfigKeys: Record<string, string> = {
  information_schema_stats_expiry: 'MariaDB has no cached information_schema statistics to expire (a MySQL 8 setting)',
  innodb_thread_concurrency: 'MariaDB 10.6 and later removed innodb_thread_concurrency',
  internal_tmp_mem_storage_engine: 'MariaDB has no TempTable engine; its in-memory temporary tables always use MEMORY (a MySQL 8 setting)',
};

/** The sql_mode names MariaDB 10.11 knows; any other is refused before it reaches a server. */
const sqlModes = new Set(['ALLOW_INVALID_DATES', 'ANSI', 'ANSI_QUOTES', 'DB2', 'EMPTY_STRING_IS_NULL', 'ERROR_FOR_DIVISION_BY_ZERO',
  'HIGH_NOT_PRECEDENCE', 'IGNORE_BAD_TABLE_OPTIONS', 'IGNORE_SPACE', 'MAXDB', 'MSSQL', 'MYSQL323', 'MYSQL40', 'NO_AUTO_CREATE_USER',
  'NO_AUTO_VALUE_ON_ZERO', 'NO_BACKSLASH_ESCAPES', 'NO_DIR_IN_CREATE', 'NO_ENGINE_SUBSTITUTION', 'NO_FIELD_OPTIONS', 'NO_KEY_OPTIONS',
  'NO_TABLE_OPTIONS', 'NO_UNSIGNED_SUBTRACTION', 'NO_ZERO_DATE', 'NO_ZERO_IN_DATE', 'ONLY_FULL_GROUP_BY', 'ORACLE',
  'PAD_CHAR_TO_FULL_LENGTH', 'PIPES_AS_CONCAT', 'POSTGRESQL', 'REAL_AS_FLOAT', 'SIMULTANEOUS_ASSIGNMENT', 'STRICT_ALL_TABLES',
  'STRICT_TRANS_TABLES', 'TIME_ROUND_FRACTIONAL', 'TRADITIONAL']);

/**
 * binlog_retention_period: the least time binary logs are kept. The servers already keep theirs
 * 7 days (replicas rejoin from them), longer than the 1-day maximum, so it is stored and shown.
 */
export const binlogRetentionKey: ConfigKey = int('Least time, in seconds, binary log entries are kept before they may be purged.', 600, 86400, 600);

export const engineConfigReasons = {
  object: 'engine_config must be an object',
  mysqlObject: 'engine_config.mysql must be an object',
  unknown: (key: string) => `${key} is not a setting of MySQL databases; see /databases/mysql/config`,
  refused: (key: string, why: string) => `${key} cannot be set on these servers: ${why}`,
  typeInteger: (key: string) => `${key} must be an integer`,
  typeBoolean: (key: string) => `${key} must be true or false`,
  typeString: (key: string) => `${key} must be a string`,
  range: (key: string, min: number, max: number) => `${key} must be from ${min} to ${max}`,
  length: (key: string, min: number, max: number) => `${key} must be ${min} to ${max} characters long`,
  format: (key: string, example: string) => `${key} is not in a valid format, e.g. ${example}`,
  sqlMode: (mode: string) => `sql_mode ${mode} is not a MariaDB SQL mode`,
} as const;
const R = engineConfigReasons;

function checkKey(errs: ErrorCollector, path: string, name: string, spec: ConfigKey, v: unknown): boolean {
  const before = errs.errors.length;
  const ok = spec.type === 'integer' ? typeof v === 'number' && Number.isInteger(v) : typeof v === spec.type;
  if (!ok) errs.add(path, spec.type === 'boolean' ? R.typeBoolean(name) : spec.type === 'string' ? R.typeString(name) : R.typeInteger(name));
  else if (typeof v === 'number' && ((spec.minimum !== undefined && v < spec.minimum) || (spec.maximum !== undefined && v > spec.maximum))) {
    errs.add(path, R.range(name, spec.minimum!, spec.maximum!));
  } else if (typeof v === 'string') {
    if (v.length < (spec.minLength ?? 0) || v.length > (spec.maxLength ?? Infinity)) errs.add(path, R.length(name, spec.minLength ?? 0, spec.maxLength!));
    else if (spec.pattern && !spec.pattern.test(v)) errs.add(path, R.format(name, String(spec.example)));
    else if (name === 'sql_mode') for (const m of v.split(',').filter(Boolean)) if (!sqlModes.has(m)) errs.add(path, R.sqlMode(m));
  }
  return errs.errors.length === before;
}

/**
 * Checks `engine_config` and merges it over `current`: a key given replaces the stored one, a key
 * given as null goes back to the server default, keys not named stay. Every violation is reported
 * with its path (`engine_config.mysql.<key>`); returns undefined when there were any.
 */
export function validateEngineConfig(errs: ErrorCollector, v: unknown, current: EngineConfig): EngineConfig | undefined {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) {
    errs.add('engine_config', R.object);
    return undefined;
  }
  const before = errs.errors.length;
  const body = v as Body;
  const out: EngineConfig = { ...current, mysql: { ...(current.mysql ?? {}) } };
  for (const [key, value] of Object.entries(body)) {
    if (key === 'binlog_retention_period') {
      if (value === null) delete out.binlog_retention_period;
      else if (checkKey(errs, 'engine_config.binlog_retention_period', key, binlogRetentionKey, value)) out.binlog_retention_period = value as number;
    } else if (key === 'mysql') {
      if (value === null || typeof value !== 'object' || Array.isArray(value)) {
        errs.add('engine_config.mysql', R.mysqlObject);
        continue;
      }
      for (const [name, x] of Object.entries(value as Body)) {
        const path = `engine_config.mysql.${name}`;
        const spec = mysqlConfigKeys[name];
        if (refusedConfigKeys[name]) errs.add(path, R.refused(name, refusedConfigKeys[name]));
        else if (!spec) errs.add(path, R.unknown(name));
        else if (x === null) delete out.mysql![name];
        else if (checkKey(errs, path, name, spec, x)) out.mysql![name] = x as string | number | boolean;
      }
    } else errs.add(`engine_config.${key}`, R.unknown(key));
  }
  if (Object.keys(out.mysql!).length === 0) delete out.mysql;
  return errs.errors.length === before ? out : undefined;
}

/** `engine_config` on its own (create), as a 400 when invalid. */
export function parseEngineConfig(v: unknown, current: EngineConfig = {}): EngineConfig {
  const errs = new ErrorCollector();
  const out = validateEngineConfig(errs, v, current);
  errs.throwIfAny();
  return out!;
}

/** The server variables a stored engine_config sets, split by how the agent applies them. */
export function serverOptions(c: EngineConfig): { restart: Record<string, string>; dynamic: Record<string, string> } {
  const restart: Record<string, string> = {};
  const dynamic: Record<string, string> = {};
  for (const [name, v] of Object.entries(c.mysql ?? {})) {
    const spec = mysqlConfigKeys[name];
    if (!spec) continue;
    const value = typeof v === 'boolean' ? (v ? 'ON' : 'OFF') : String(v);
    (spec.requiresRestart ? restart : dynamic)[spec.variable ?? name] = value;
  }
  return { restart, dynamic };
}

/** GET /databases/mysql/config: each accepted key with its type, limits and restart need. */
export function configDescription(): Record<string, unknown> {
  const describe = (k: ConfigKey) => {
    const out: Record<string, unknown> = { description: k.description, example: k.example };
    if (k.enum) out.enum = k.enum;
    if (k.maxLength !== undefined) out.maxLength = k.maxLength;
    if (k.maximum !== undefined) out.maximum = k.maximum;
    if (k.minLength !== undefined) out.minLength = k.minLength;
    if (k.minimum !== undefined) out.minimum = k.minimum;
    if (k.pattern) out.pattern = k.pattern.source;
    out.requires_restart = k.requiresRestart;
    out.type = k.nullable ? ['null', k.type] : k.type;
    return out;
  };
  return {
    binlog_retention_period: describe(binlogRetentionKey),
    mysql: Object.fromEntries(Object.entries(mysqlConfigKeys).map(([name, k]) => [name, describe(k)])),
  };
}

/**
 * Whether an update of a cluster spread over hosts needs its members restarted, pure: a plan
 * change, a version upgrade, or an engine_config key applied only at start that changed.
 */
export function needsRollingRestart(
  before: { type: string; engineId: string; engineConfig: EngineConfig }, patch: Partial<{ type: string; engineId: string; engineConfig: EngineConfig }>,
): boolean {
  if (patch.type !== undefined && patch.type !== before.type) return true;
  if (patch.engineId !== undefined && patch.engineId !== before.engineId) return true;
  if (patch.engineConfig === undefined) return false;
  return JSON.stringify(serverOptions(patch.engineConfig).restart) !== JSON.stringify(serverOptions(before.engineConfig).restart);
}
