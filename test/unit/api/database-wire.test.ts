import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { databaseToWire } from '../../../control-plane/api/wire/databases.js';
import type { DatabaseRecord } from '../../../control-plane/domain/databases/model.js';
import { assertCurrentDatabase } from '../../helpers/database-schema.js';
import { repoRoot } from '../../helpers/lab.js';

/**
 * The full MySQL database object against both schemas it must satisfy: the official 4.176
 * `DatabaseMySQL` (old clients) and the shape today's clients decode. The 4.176 schema types both
 * disk sizes as integers without null, which the object broke while provisioning.
 */
const spec = parse(readFileSync(join(repoRoot, 'test', 'fixtures', 'openapi', 'linode-openapi-4.176.0-subset.yaml'), 'utf8'));

/** Resolves $refs and OpenAPI `nullable` into plain JSON Schema (enough for this one schema). */
function resolve(node: any): any {
  if (Array.isArray(node)) return node.map(resolve);
  if (node === null || typeof node !== 'object') return node;
  if (typeof node.$ref === 'string') return resolve(node.$ref.slice(2).split('/').reduce((o: any, k: string) => o[k], spec));
  const out: any = {};
  for (const [k, v] of Object.entries(node)) {
    if (k.startsWith('x-') || ['description', 'example', 'nullable', 'readOnly', 'default', 'format'].includes(k)) continue;
    out[k] = k === 'properties' ? Object.fromEntries(Object.entries(v as object).map(([p, s]) => [p, resolve(s)])) : resolve(v);
  }
  if (node.nullable === true && typeof out.type === 'string') out.type = [out.type, 'null'];
  return out;
}

const legacy = new Ajv({ allErrors: true, strict: false }).compile(resolve(spec.components.schemas.DatabaseMySQL));

const record = (over: Partial<DatabaseRecord> = {}): DatabaseRecord => ({
  id: 7, label: 'wire-db', region: 'us-east', type: 'g6-nanode-1', engineId: 'mysql/10.11.14', version: '10.11.14', image: '', binary: '/usr/sbin/mariadbd',
  clusterSize: 3, replicationType: 'semi_synch', encrypted: false, sslConnection: true, allowList: ['203.0.113.1'],
  updates: { frequency: 'weekly', duration: 3, hour_of_day: 0, day_of_week: 7, week_of_month: null }, status: 'provisioning',
  hostPrimary: '127.78.0.2', hostSecondary: '127.78.0.3', port: 3306, provisioned: false, members: {}, caCert: null, usedDiskMb: null,
  patchPending: false, engineConfig: {}, rootPassword: 'x', nextPassword: null, generation: 1, convergedGeneration: 0, runState: 'running',
  agentId: null, term: 1, primaryMember: 1, pendingEventId: null, secondEventId: null, deleting: false, deleteEventId: null, lastError: null,
  created: Date.UTC(2026, 0, 1), updated: Date.UTC(2026, 0, 1), ...over,
});

describe('the MySQL database object', () => {
  it('meets the 4.176 schema and today\'s client shape while provisioning (integers, never null disks)', () => {
    const w = databaseToWire(record());
    expect(legacy(w), JSON.stringify(legacy.errors)).toBe(true);
    assertCurrentDatabase(w);
    expect(w).toMatchObject({ total_disk_size_gb: 25, used_disk_size_gb: 0 });
    // The check can fail: the old provisioning shape is refused by the 4.176 schema.
    expect(legacy({ ...w, total_disk_size_gb: null, used_disk_size_gb: null })).toBe(false);
  });

  it('meets both once active, with members, hosts and a pending update', () => {
    const w = databaseToWire(record({
      status: 'active', provisioned: true, usedDiskMb: 1500, members: { '127.79.0.2': 'primary', '127.79.0.3': 'failover', '127.79.0.4': 'failover' },
      engineConfig: { mysql: { wait_timeout: 60, sql_require_primary_key: true }, binlog_retention_period: 600 },
    }), [{ deadline: null, description: 'A new build', planned_for: '2026-01-04T00:00:00' }]);
    expect(legacy(w), JSON.stringify(legacy.errors)).toBe(true);
    assertCurrentDatabase(w);
    expect(w).toMatchObject({ used_disk_size_gb: 2, hosts: { primary: '127.78.0.2', secondary: '127.78.0.3', standby: '127.78.0.3' } });
  });

  it('shows a fork\'s source and restore second, and the oldest restorable second, in the API\'s time format', () => {
    const w = databaseToWire(record({ status: 'active', provisioned: true, fork: { source: 7, restoreTimeMs: Date.UTC(2026, 0, 2, 3, 4, 5) }, oldestRestoreMs: Date.UTC(2026, 0, 1, 0, 0, 1) }));
    expect(legacy(w), JSON.stringify(legacy.errors)).toBe(true);
    assertCurrentDatabase(w);
    expect(w).toMatchObject({ fork: { source: 7, restore_time: '2026-01-02T03:04:05' }, oldest_restore_time: '2026-01-01T00:00:01' });
    expect(databaseToWire(record())).toMatchObject({ fork: null, oldest_restore_time: null });
  });

  it('leaves the 4.176 schema only where today\'s platform goes beyond it: resizing and a 4-hour window', () => {
    const w = databaseToWire(record({ status: 'resizing', provisioned: true, updates: { frequency: 'weekly', duration: 4, hour_of_day: 0, day_of_week: 7, week_of_month: null } }));
    assertCurrentDatabase(w);
    expect(legacy(w)).toBe(false);
    expect(legacy.errors!.map((e) => e.instancePath).sort()).toEqual(['/status', '/updates/duration']);
  });
});
