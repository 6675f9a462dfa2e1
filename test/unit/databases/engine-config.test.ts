import { describe, expect, it } from 'vitest';
import { FulcrumError } from '../../../lib/errors.js';
import { configDescription, mysqlConfigKeys, parseEngineConfig, refusedConfigKeys, serverOptions } from '../../../control-plane/domain/databases/engine-config.js';
import { assertCurrentConfig, clientConfigKeys } from '../../helpers/database-schema.js';

const errors = (fn: () => unknown): { field?: string; reason: string }[] => {
  try {
    fn();
  } catch (err) {
    if (err instanceof FulcrumError) return err.errors ?? [];
    throw err;
  }
  return [];
};

describe('engine_config', () => {
  it('knows every key today\'s clients send: accepted or refused by name, none ignored', () => {
    for (const k of clientConfigKeys) expect(k in mysqlConfigKeys || k in refusedConfigKeys, k).toBe(true);
    expect(Object.keys(refusedConfigKeys).sort()).toEqual(['information_schema_stats_expiry', 'innodb_thread_concurrency', 'internal_tmp_mem_storage_engine']);
  });

  it('accepts values in range and refuses the rest with 400s naming the key', () => {
    expect(parseEngineConfig({ mysql: { connect_timeout: 20, sql_mode: 'ANSI,TRADITIONAL', sql_require_primary_key: true }, binlog_retention_period: 600 }))
      .toEqual({ mysql: { connect_timeout: 20, sql_mode: 'ANSI,TRADITIONAL', sql_require_primary_key: true }, binlog_retention_period: 600 });
    expect(errors(() => parseEngineConfig({ mysql: { innodb_ft_min_token_size: 17 } }))).toEqual([
      { field: 'engine_config.mysql.innodb_ft_min_token_size', reason: 'innodb_ft_min_token_size must be from 0 to 16' },
    ]);
    expect(errors(() => parseEngineConfig({
      mysql: { wait_timeout: '10', nope: 1, internal_tmp_mem_storage_engine: 'MEMORY', sql_mode: 'ANSI,NOT_A_MODE', default_time_zone: 'Europe/Paris' },
      binlog_retention_period: 10,
      other: 1,
    })).map((e) => e.field)).toEqual([
      'engine_config.mysql.wait_timeout', 'engine_config.mysql.nope', 'engine_config.mysql.internal_tmp_mem_storage_engine',
      'engine_config.mysql.sql_mode', 'engine_config.mysql.default_time_zone', 'engine_config.binlog_retention_period', 'engine_config.other',
    ]);
    expect(errors(() => parseEngineConfig({ mysql: { group_concat_max_len: 1.5 } }))[0]!.reason).toBe('group_concat_max_len must be an integer');
    expect(errors(() => parseEngineConfig([]))).toEqual([{ field: 'engine_config', reason: 'engine_config must be an object' }]);
  });

  it('merges over the stored config; null puts a key back to the server default', () => {
    const cur = { mysql: { wait_timeout: 100, connect_timeout: 20 }, binlog_retention_period: 900 };
    expect(parseEngineConfig({ mysql: { wait_timeout: null, max_allowed_packet: 1048576 } }, cur))
      .toEqual({ mysql: { connect_timeout: 20, max_allowed_packet: 1048576 }, binlog_retention_period: 900 });
    expect(parseEngineConfig({ mysql: { wait_timeout: null, connect_timeout: null }, binlog_retention_period: null }, cur)).toEqual({});
  });

  it('splits server variables into restart and dynamic ones, with MariaDB names and values', () => {
    expect(serverOptions({ mysql: { innodb_ft_min_token_size: 2, innodb_rollback_on_timeout: true, sql_require_primary_key: false, default_time_zone: '+02:00', wait_timeout: 60 }, binlog_retention_period: 600 }))
      .toEqual({
        restart: { innodb_ft_min_token_size: '2', innodb_rollback_on_timeout: 'ON' },
        dynamic: { innodb_force_primary_key: 'OFF', time_zone: '+02:00', wait_timeout: '60' },
      });
  });

  it('describes each accepted key with type, limits and restart need', () => {
    const d = configDescription() as any;
    expect(d.binlog_retention_period).toMatchObject({ minimum: 600, maximum: 86400, requires_restart: false, type: 'integer' });
    expect(d.mysql.innodb_ft_min_token_size).toMatchObject({ minimum: 0, maximum: 16, requires_restart: true, type: 'integer' });
    expect(d.mysql.sql_mode).toMatchObject({ maxLength: 1024, requires_restart: false, type: 'string' });
    expect(d.mysql).not.toHaveProperty('internal_tmp_mem_storage_engine');
    // Typed as the real service describes them, and so strictly as the current schema wants.
    expect(d.mysql.group_concat_max_len.type).toBe('integer');
    expect(d.mysql.innodb_ft_server_stopword_table.type).toEqual(['null', 'string']);
    assertCurrentConfig(d);
  });
});
