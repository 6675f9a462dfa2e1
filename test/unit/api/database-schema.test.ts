import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { currentConfigSchema, currentDatabaseErrors, currentDatabaseSchema } from '../../helpers/database-schema.js';
import { repoRoot } from '../../helpers/lab.js';

/**
 * The hand-written current database schema (test/helpers/database-schema.ts) checked against the
 * official 4.176 subset key by key, and checked to be strict: the integration and e2e tests lean
 * on it, so a schema that let anything through would make their checks unable to fail.
 */
const spec = parse(readFileSync(join(repoRoot, 'test', 'fixtures', 'openapi', 'linode-openapi-4.176.0-subset.yaml'), 'utf8'));

function deref(node: any): any {
  while (node && typeof node.$ref === 'string') node = node.$ref.slice(2).split('/').reduce((o: any, k: string) => o[k], spec);
  return node;
}

/** Where the current schema is wider than 4.176 on purpose (docs/compatibility.md, "Where the database schema comes from"). */
const widened: Record<string, string[]> = {
  cluster_size: ['enum'],
  status: ['enum'],
  'updates.duration': ['maximum'],
};

/** The JSON types a (current) schema node admits. */
function typesOf(s: any): Set<string> {
  const out = new Set<string>();
  if (s.anyOf) for (const x of s.anyOf) for (const t of typesOf(x)) out.add(t);
  if (s.type) for (const t of [s.type].flat()) out.add(t);
  const values = s.enum ?? (s.const !== undefined ? [s.const] : []);
  for (const v of values) out.add(v === null ? 'null' : Number.isInteger(v) ? 'integer' : typeof v);
  return out;
}

function compare(legacy: any, current: any, path: string, problems: string[]): void {
  const l = deref(legacy);
  const ok = widened[path] ?? [];
  const types = typesOf(current);
  if (l.type && !types.has(l.type) && !(l.type === 'string' && current.const !== undefined)) problems.push(`${path}: type ${l.type} not admitted`);
  if ((l.nullable === true) !== types.has('null')) problems.push(`${path}: null ${l.nullable ? 'refused' : 'admitted'}`);
  if (l.enum) {
    const cur: unknown[] = current.enum ?? (current.const !== undefined ? [current.const] : []);
    if (!l.enum.every((v: unknown) => cur.includes(v))) problems.push(`${path}: enum ${JSON.stringify(cur)} lacks some of ${JSON.stringify(l.enum)}`);
    if (cur.some((v) => !l.enum.includes(v)) && !ok.includes('enum')) problems.push(`${path}: enum widened`);
  }
  for (const k of ['minimum', 'maximum', 'minLength', 'maxLength', 'pattern']) {
    if (l[k] !== undefined && l[k] !== current[k] && !ok.includes(k)) problems.push(`${path}: ${k} ${current[k]} where 4.176 says ${l[k]}`);
  }
  if (l.items) compare(l.items, current.items ?? {}, `${path}[]`, problems);
  for (const [name, sub] of Object.entries<any>(l.properties ?? {})) {
    const c = current.properties?.[name];
    if (!c) problems.push(`${path ? `${path}.` : ''}${name}: missing`);
    else {
      if (!(current.required ?? []).includes(name)) problems.push(`${path ? `${path}.` : ''}${name}: not required`);
      compare(sub, c, path ? `${path}.${name}` : name, problems);
    }
  }
}

/** A full object as Fulcrum answers it, every key present. */
const sample = () => ({
  allow_list: ['203.0.113.1', '192.0.2.0/24'], cluster_size: 3, created: '2026-01-01T00:00:00', encrypted: false, engine: 'mysql',
  engine_config: { binlog_retention_period: 600, mysql: { wait_timeout: 60, innodb_ft_server_stopword_table: 'db/t' } },
  fork: { source: 5, restore_time: '2026-01-02T03:04:05' },
  hosts: { primary: '127.78.0.2', secondary: '127.78.0.3', standby: '127.78.0.3' }, id: 7, label: 'sample-db',
  members: { '127.79.0.2': 'primary', '127.79.0.3': 'failover' }, oldest_restore_time: '2026-01-01T00:00:01', platform: 'rdbms-default',
  port: 3306, region: 'us-east', replication_type: 'semi_synch', ssl_connection: true, status: 'active', total_disk_size_gb: 25, type: 'g6-nanode-1',
  updated: '2026-01-01T00:00:00',
  updates: { day_of_week: 7, duration: 3, frequency: 'weekly', hour_of_day: 0, week_of_month: null, pending: [{ deadline: null, description: 'x', planned_for: '2026-01-04T00:00:00' }] },
  used_disk_size_gb: 1, version: '10.11.14',
});

describe('the current database schema', () => {
  it('has every key of the 4.176 DatabaseMySQL, required, with its types, enums, ranges and patterns (wider only where listed)', () => {
    const problems: string[] = [];
    compare(spec.components.schemas.DatabaseMySQL, currentDatabaseSchema, '', problems);
    expect(problems).toEqual([]);
    // The comparison can fail: a schema without hosts.secondary and with a 1-3 window would be caught.
    const broken = structuredClone(currentDatabaseSchema) as any;
    delete broken.properties.hosts.properties.secondary;
    broken.properties.updates.properties.hour_of_day.maximum = 24;
    const found: string[] = [];
    compare(spec.components.schemas.DatabaseMySQL, broken, '', found);
    expect(found).toEqual(['hosts.secondary: missing', 'updates.hour_of_day: maximum 24 where 4.176 says 23']);
  });

  it('takes a full object and a real-shaped fork with a private network', () => {
    expect(currentDatabaseErrors(sample())).toEqual([]);
    expect(currentDatabaseErrors({ ...sample(), fork: null, oldest_restore_time: null, private_network: { vpc_id: 1, subnet_id: 2, public_access: true } })).toEqual([]);
    expect(currentDatabaseErrors({ ...sample(), private_network: null, engine_config: {} })).toEqual([]);
  });

  it('refuses an unknown key at every level, and a missing required one', () => {
    const withKey = (mutate: (o: any) => void) => {
      const o: any = sample();
      mutate(o);
      return currentDatabaseErrors(o);
    };
    expect(withKey((o) => { o.instance_uri = '/v4/databases/mysql/instances/7'; })).not.toEqual([]);
    expect(withKey((o) => { o.hosts.replica = 'x'; })).not.toEqual([]);
    expect(withKey((o) => { o.updates.start = 1; })).not.toEqual([]);
    expect(withKey((o) => { o.updates.pending[0].why = 'x'; })).not.toEqual([]);
    expect(withKey((o) => { o.fork['-'] = '2026-01-02T03:04:05Z'; })).not.toEqual([]);
    expect(withKey((o) => { o.engine_config.max_connections = 10; })).not.toEqual([]);
    expect(withKey((o) => { o.engine_config.mysql.max_connections = 10; })).not.toEqual([]);
    expect(withKey((o) => { o.private_network = { vpc_id: 1, subnet_id: 2, public_access: true, extra: 1 }; })).not.toEqual([]);
    for (const key of currentDatabaseSchema.required) {
      expect(withKey((o) => { delete o[key]; }), key).not.toEqual([]);
    }
    for (const key of ['primary', 'secondary', 'standby']) expect(withKey((o) => { delete o.hosts[key]; }), key).not.toEqual([]);
    for (const key of ['week_of_month', 'pending', 'duration']) expect(withKey((o) => { delete o.updates[key]; }), key).not.toEqual([]);
    expect(withKey((o) => { delete o.fork.restore_time; })).not.toEqual([]);
    // Types: a null disk size, a member that is not an address, a string where engine_config has an integer.
    expect(withKey((o) => { o.used_disk_size_gb = null; })).not.toEqual([]);
    expect(withKey((o) => { o.members = { 'lin-1-mysql': 'primary' }; })).not.toEqual([]);
    expect(withKey((o) => { o.engine_config.mysql.wait_timeout = '60'; })).not.toEqual([]);
    expect(withKey((o) => { o.allow_list = ['example.com']; })).not.toEqual([]);
  });

  it('describes /databases/mysql/config strictly: the client keys, each with its own type', () => {
    const mysql = currentConfigSchema.properties.mysql;
    expect(mysql.additionalProperties).toBe(false);
    expect(Object.keys(mysql.properties)).toHaveLength(27);
    expect(mysql.required).toHaveLength(24);
    expect((mysql.properties as any).group_concat_max_len.properties.type).toEqual({ const: 'integer' });
  });
});
