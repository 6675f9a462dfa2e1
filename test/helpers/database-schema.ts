import { Ajv } from 'ajv';

/**
 * The public shape of a Managed MySQL database object and of GET /databases/mysql/config today,
 * written down here so the repository stands alone (docs/compatibility.md, "Where the database
 * schema comes from", says where each part comes from):
 *
 * - every key of the official 4.176 `DatabaseMySQL` (test/fixtures/openapi/linode-openapi-4.176.0-subset.yaml),
 *   with its types, enums, ranges and patterns; test/unit/api/database-schema.test.ts checks this
 *   file against that subset key by key, so a 4.176 key cannot go missing or drift;
 * - the keys added since, typed as today's clients decode them: linodego v2 (`MySQLDatabase`,
 *   `MySQLDatabaseEngineConfigMySQL`, `MySQLDatabaseConfigInfo`), @linode/api-v4 (`Database`,
 *   `PendingUpdates`, `ClusterSize`, `DatabaseStatus`) and linodego's recorded real answers;
 * - where the two disagree, the wider of the two, each place named below.
 *
 * Strict: an object with a key not listed here fails, and so does one missing a required key.
 * Required are the keys Fulcrum promises on every answer (docs/databases.md, "Objects"): every
 * 4.176 key and every newer one except `private_network`, which the real service sends only for a
 * database in a VPC (Fulcrum has none).
 */
const wireTime = { type: 'string', pattern: '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}$' };
const nullable = (s: object) => ({ anyOf: [s, { type: 'null' }] });
/** 4.176 `Database.allow_list` items; also the shape of an address in `members`. */
const ipv4OrCidr = '^([0-9]{1,3}\\.){3}[0-9]{1,3}(\\/([0-9]|[1-2][0-9]|3[0-2]))?$';
const ipv4 = '^([0-9]{1,3}\\.){3}[0-9]{1,3}$';

const updates = {
  type: 'object',
  additionalProperties: false,
  required: ['day_of_week', 'duration', 'frequency', 'hour_of_day', 'week_of_month', 'pending'],
  properties: {
    day_of_week: { type: 'integer', minimum: 1, maximum: 7 },
    // 4.176 says 1-3; today's service answers 4 (linodego's recordings) and its clients send it.
    duration: { type: 'integer', minimum: 1, maximum: 4 },
    frequency: { enum: ['weekly', 'monthly'] },
    hour_of_day: { type: 'integer', minimum: 0, maximum: 23 },
    week_of_month: { type: ['integer', 'null'], minimum: 1, maximum: 4 },
    // Since 4.176: @linode/api-v4 `PendingUpdates`, linodego `DatabaseMaintenanceWindowPending`.
    pending: {
      type: 'array',
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['deadline', 'description', 'planned_for'],
        properties: { deadline: nullable(wireTime), description: { type: 'string' }, planned_for: nullable(wireTime) },
      },
    },
  },
};

/**
 * The `engine_config.mysql` keys and the JSON type of each, as linodego's
 * `MySQLDatabaseEngineConfigMySQL` encodes them and the real /databases/mysql/config describes
 * them (`group_concat_max_len` is a float64 in linodego, described as an integer by the service;
 * the stopword table is the one key the service types `["null", "string"]`).
 */
const mysqlKeyTypes: Record<string, 'integer' | 'string' | 'boolean' | 'nullableString'> = {
  connect_timeout: 'integer', default_time_zone: 'string', group_concat_max_len: 'integer', information_schema_stats_expiry: 'integer',
  innodb_change_buffer_max_size: 'integer', innodb_flush_neighbors: 'integer', innodb_ft_min_token_size: 'integer',
  innodb_ft_server_stopword_table: 'nullableString', innodb_lock_wait_timeout: 'integer', innodb_log_buffer_size: 'integer',
  innodb_online_alter_log_max_size: 'integer', innodb_read_io_threads: 'integer', innodb_rollback_on_timeout: 'boolean',
  innodb_thread_concurrency: 'integer', innodb_write_io_threads: 'integer', interactive_timeout: 'integer',
  internal_tmp_mem_storage_engine: 'string', max_allowed_packet: 'integer', max_heap_table_size: 'integer', net_buffer_length: 'integer',
  net_read_timeout: 'integer', net_write_timeout: 'integer', sort_buffer_size: 'integer', sql_mode: 'string',
  sql_require_primary_key: 'boolean', tmp_table_size: 'integer', wait_timeout: 'integer',
};

/** Every key linodego's MySQLDatabaseConfigInfoMySQL decodes. */
export const clientConfigKeys = Object.keys(mysqlKeyTypes);

/**
 * The three client keys MariaDB cannot honour: Fulcrum refuses them by name and leaves them out
 * of /databases/mysql/config (docs/databases.md, "engine_config"), so they are not required there.
 */
const keysFulcrumRefuses = ['information_schema_stats_expiry', 'innodb_thread_concurrency', 'internal_tmp_mem_storage_engine'];

const valueSchema = (t: string) => (t === 'nullableString' ? { type: ['string', 'null'] } : { type: t });

const engineConfig = {
  type: 'object',
  additionalProperties: false,
  properties: {
    binlog_retention_period: { type: 'integer', minimum: 600, maximum: 86400 },
    mysql: {
      type: 'object',
      additionalProperties: false,
      properties: Object.fromEntries(Object.entries(mysqlKeyTypes).map(([k, t]) => [k, valueSchema(t)])),
    },
  },
};

export const currentDatabaseSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['allow_list', 'cluster_size', 'created', 'encrypted', 'engine', 'hosts', 'id', 'label', 'port', 'region', 'replication_type',
    'ssl_connection', 'status', 'total_disk_size_gb', 'type', 'updated', 'updates', 'used_disk_size_gb', 'version',
    'engine_config', 'fork', 'members', 'oldest_restore_time', 'platform'],
  properties: {
    // The 4.176 keys (DatabaseMySQL, and the Database properties it refers to).
    allow_list: { type: 'array', items: { type: 'string', pattern: ipv4OrCidr } },
    // 4.176: 1 or 3; @linode/api-v4's ClusterSize adds 2.
    cluster_size: { enum: [1, 2, 3] },
    created: wireTime,
    encrypted: { type: 'boolean' },
    engine: { const: 'mysql' },
    hosts: {
      type: 'object',
      additionalProperties: false,
      // `secondary` is the 4.176 name, `standby` today's (linodego `DatabaseHost`); Fulcrum sends both.
      required: ['primary', 'secondary', 'standby'],
      properties: { primary: { type: ['string', 'null'] }, secondary: { type: ['string', 'null'] }, standby: { type: ['string', 'null'] } },
    },
    id: { type: 'integer' },
    label: { type: 'string', minLength: 3, maxLength: 32 },
    port: { type: 'integer', minimum: 1, maximum: 65535 },
    region: { type: 'string' },
    replication_type: { enum: ['none', 'asynch', 'semi_synch'] },
    ssl_connection: { type: 'boolean' },
    // 4.176's ten, plus resizing, migrating, migrated (@linode/api-v4) and deleting, deleted (linodego).
    status: { enum: ['provisioning', 'active', 'suspending', 'suspended', 'resuming', 'restoring', 'failed', 'degraded', 'updating', 'backing_up',
      'resizing', 'migrating', 'migrated', 'deleting', 'deleted'] },
    // Integers in 4.176 and linodego; @linode/api-v4 also allows a null used size, Fulcrum never sends one.
    total_disk_size_gb: { type: 'integer', minimum: 0 },
    type: { type: 'string' },
    updated: wireTime,
    updates,
    used_disk_size_gb: { type: 'integer', minimum: 0 },
    version: { type: 'string' },
    // Since 4.176 (linodego MySQLDatabase, @linode/api-v4 Database).
    engine_config: engineConfig,
    fork: nullable({
      type: 'object',
      additionalProperties: false,
      required: ['source', 'restore_time'],
      properties: { source: { type: 'integer' }, restore_time: wireTime },
    }),
    members: { type: 'object', propertyNames: { pattern: ipv4 }, additionalProperties: { enum: ['primary', 'failover'] } },
    oldest_restore_time: nullable(wireTime),
    platform: { enum: ['rdbms-legacy', 'rdbms-default'] },
    private_network: nullable({
      type: 'object',
      additionalProperties: false,
      required: ['vpc_id', 'subnet_id', 'public_access'],
      properties: { vpc_id: { type: 'integer' }, subnet_id: { type: 'integer' }, public_access: { type: 'boolean' } },
    }),
  },
};

/**
 * One key of /databases/mysql/config: the fields linodego's `ConnectTimeout`, `DefaultTimeZone`,
 * `InnoDBFTServerStopwordTable`, ... decode, with `type` and `example` of the key's own type.
 */
function keyInfo(t: string): object {
  const example = t === 'nullableString' ? { type: 'string' } : { type: t };
  return {
    type: 'object',
    additionalProperties: false,
    required: ['description', 'example', 'requires_restart', 'type'],
    properties: {
      description: { type: 'string', minLength: 1 },
      example,
      requires_restart: { type: 'boolean' },
      type: t === 'nullableString' ? { type: 'array', items: { enum: ['null', 'string'] }, minItems: 2, uniqueItems: true } : { const: t },
      minimum: { type: 'number' },
      maximum: { type: 'number' },
      minLength: { type: 'integer' },
      maxLength: { type: 'integer' },
      pattern: { type: 'string' },
      enum: { type: 'array', items: { type: 'string' } },
    },
  };
}

export const currentConfigSchema = {
  type: 'object',
  required: ['mysql', 'binlog_retention_period'],
  additionalProperties: false,
  properties: {
    binlog_retention_period: keyInfo('integer'),
    mysql: {
      type: 'object',
      additionalProperties: false,
      required: clientConfigKeys.filter((k) => !keysFulcrumRefuses.includes(k)),
      properties: Object.fromEntries(Object.entries(mysqlKeyTypes).map(([k, t]) => [k, keyInfo(t)])),
    },
  },
};

const ajv = new Ajv({ allErrors: true, strict: false });
const checkDatabase = ajv.compile(currentDatabaseSchema);
const checkConfig = ajv.compile(currentConfigSchema);

/** Throws when `body` is not a database object as today's clients read it. */
export function assertCurrentDatabase(body: unknown): void {
  if (!checkDatabase(body)) throw new Error(`not a current database object: ${ajv.errorsText(checkDatabase.errors)}\n${JSON.stringify(body).slice(0, 1500)}`);
}

/** Throws when `body` is not a GET /databases/mysql/config answer as today's clients read it. */
export function assertCurrentConfig(body: unknown): void {
  if (!checkConfig(body)) throw new Error(`not a current config answer: ${ajv.errorsText(checkConfig.errors)}`);
}

/** The errors `body` gets against the database schema (empty when it passes), for tests of the schema itself. */
export function currentDatabaseErrors(body: unknown): string[] {
  return checkDatabase(body) ? [] : (checkDatabase.errors ?? []).map((e) => `${e.instancePath} ${e.message}`);
}
