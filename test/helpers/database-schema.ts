import { Ajv } from 'ajv';

/**
 * The current public shape of a Managed MySQL database and of GET /databases/mysql/config, as
 * today's clients read them (linodego v2 `MySQLDatabase` and `MySQLDatabaseConfigInfo`, the
 * Terraform provider's `linode_database_mysql_v2`, @linode/api-v4 `Database`, and a recorded
 * response in the Ansible collection's docs). The official 4.176 subset has no such schema, so
 * this one is written down here from those sources: every key they read is required, with the
 * type they decode it into (a null where they decode an int would break linodego).
 */
const wireTime = { type: 'string', pattern: '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}$' };
const nullableString = { type: ['string', 'null'] };

const updates = {
  type: 'object',
  required: ['frequency', 'duration', 'hour_of_day', 'day_of_week', 'pending'],
  properties: {
    frequency: { enum: ['weekly', 'monthly'] },
    duration: { type: 'integer', minimum: 1, maximum: 4 },
    hour_of_day: { type: 'integer', minimum: 0, maximum: 23 },
    day_of_week: { type: 'integer', minimum: 1, maximum: 7 },
    week_of_month: { type: ['integer', 'null'], minimum: 1, maximum: 4 },
    pending: {
      type: 'array',
      items: {
        type: 'object',
        required: ['deadline', 'description', 'planned_for'],
        additionalProperties: false,
        properties: { deadline: { anyOf: [wireTime, { type: 'null' }] }, description: { type: 'string' }, planned_for: { anyOf: [wireTime, { type: 'null' }] } },
      },
    },
  },
};

const engineConfigValues = { type: ['integer', 'number', 'string', 'boolean'] };

export const currentDatabaseSchema = {
  type: 'object',
  required: ['id', 'label', 'region', 'type', 'engine', 'version', 'status', 'cluster_size', 'platform', 'members', 'ssl_connection',
    'encrypted', 'allow_list', 'created', 'updated', 'updates', 'used_disk_size_gb', 'total_disk_size_gb', 'port', 'hosts', 'engine_config',
    'oldest_restore_time', 'fork'],
  properties: {
    id: { type: 'integer' },
    label: { type: 'string', minLength: 3, maxLength: 32 },
    region: { type: 'string' },
    type: { type: 'string' },
    engine: { const: 'mysql' },
    version: { type: 'string' },
    status: { enum: ['provisioning', 'active', 'suspending', 'suspended', 'resuming', 'restoring', 'failed', 'degraded', 'updating', 'backing_up', 'resizing', 'migrating', 'migrated'] },
    cluster_size: { enum: [1, 2, 3] },
    platform: { enum: ['rdbms-legacy', 'rdbms-default'] },
    members: { type: 'object', additionalProperties: { enum: ['primary', 'failover'] } },
    ssl_connection: { type: 'boolean' },
    encrypted: { type: 'boolean' },
    allow_list: { type: 'array', items: { type: 'string' } },
    created: wireTime,
    updated: wireTime,
    updates,
    used_disk_size_gb: { type: 'integer', minimum: 0 },
    total_disk_size_gb: { type: 'integer', minimum: 0 },
    port: { type: 'integer', minimum: 1, maximum: 65535 },
    hosts: {
      type: 'object',
      required: ['primary', 'standby'],
      properties: { primary: nullableString, standby: nullableString, secondary: nullableString },
    },
    // linodego decodes both as optional pointers: a time in the API's format, and {source, restore_time}.
    oldest_restore_time: { anyOf: [wireTime, { type: 'null' }] },
    fork: {
      anyOf: [{ type: 'null' }, {
        type: 'object', required: ['source', 'restore_time'], additionalProperties: false,
        properties: { source: { type: 'integer' }, restore_time: wireTime },
      }],
    },
    engine_config: {
      type: 'object',
      additionalProperties: false,
      properties: {
        binlog_retention_period: { type: 'integer' },
        mysql: { type: 'object', additionalProperties: engineConfigValues },
      },
    },
  },
};

const keyInfo = {
  type: 'object',
  required: ['description', 'example', 'requires_restart', 'type'],
  properties: {
    description: { type: 'string', minLength: 1 },
    requires_restart: { type: 'boolean' },
    type: { anyOf: [{ enum: ['integer', 'number', 'string', 'boolean'] }, { type: 'array', items: { enum: ['string', 'null'] } }] },
    minimum: { type: 'number' },
    maximum: { type: 'number' },
    minLength: { type: 'integer' },
    maxLength: { type: 'integer' },
    pattern: { type: 'string' },
    enum: { type: 'array', items: { type: 'string' } },
  },
};

/** Every key linodego's MySQLDatabaseConfigInfoMySQL decodes. */
export const clientConfigKeys = ['connect_timeout', 'default_time_zone', 'group_concat_max_len', 'information_schema_stats_expiry',
  'innodb_change_buffer_max_size', 'innodb_flush_neighbors', 'innodb_ft_min_token_size', 'innodb_ft_server_stopword_table',
  'innodb_lock_wait_timeout', 'innodb_log_buffer_size', 'innodb_online_alter_log_max_size', 'innodb_read_io_threads',
  'innodb_rollback_on_timeout', 'innodb_thread_concurrency', 'innodb_write_io_threads', 'interactive_timeout',
  'internal_tmp_mem_storage_engine', 'max_allowed_packet', 'max_heap_table_size', 'net_buffer_length', 'net_read_timeout',
  'net_write_timeout', 'sort_buffer_size', 'sql_mode', 'sql_require_primary_key', 'tmp_table_size', 'wait_timeout'];

export const currentConfigSchema = {
  type: 'object',
  required: ['mysql', 'binlog_retention_period'],
  additionalProperties: false,
  properties: {
    binlog_retention_period: keyInfo,
    mysql: { type: 'object', additionalProperties: keyInfo },
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
