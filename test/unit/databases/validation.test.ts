import { describe, expect, it } from 'vitest';
import { ErrorCollector, FulcrumError } from '../../../lib/errors.js';
import { isIpv4OrCidr } from '../../../lib/ipv4.js';
import { compareVersions, defaultUpdates, parseRestoreTime, validateCreate, validateSnapshot, validateUpdate, validateUpdates } from '../../../control-plane/domain/databases/validation.js';
import { needsRollingRestart } from '../../../control-plane/domain/databases/engine-config.js';

const look = {
  engineExists: (id: string) => id === 'mysql/10.11.14',
  regionExists: (id: string) => id === 'us-east',
  typeExists: (id: string) => id.startsWith('g6-'),
  labelTaken: (l: string) => l === 'taken',
};
const base = { label: 'abc', region: 'us-east', type: 'g6-nanode-1', engine: 'mysql/10.11.14' };

function fields(fn: () => unknown): string[] {
  try {
    fn();
  } catch (e) {
    if (e instanceof FulcrumError) return e.errors.map((x) => x.field ?? '');
    throw e;
  }
  return [];
}

describe('database validation', () => {
  it('accepts IPv4 addresses and CIDRs only', () => {
    for (const ok of ['0.0.0.0/0', '127.0.0.2', '127.0.0.2/32', '10.0.0.0/8', '255.255.255.255']) expect(isIpv4OrCidr(ok), ok).toBe(true);
    for (const bad of ['256.0.0.1', '1.2.3.4/33', '1.2.3', '1.2.3.4/', 'a.b.c.d', '01.2.3.4', '1.2.3.4/24 ', '::1', '']) expect(isIpv4OrCidr(bad), bad).toBe(false);
  });

  it('checks a fork: source readable and forkable, same engine, restore_time from oldest_restore_time to now', () => {
    const now = Date.UTC(2026, 0, 2, 12, 0, 0, 500);
    const oldest = Date.UTC(2026, 0, 1, 0, 0, 1);
    const sources: Record<number, { status: string; engineId: string; oldestRestoreMs: number | null }> = {
      7: { status: 'active', engineId: 'mysql/10.11.14', oldestRestoreMs: oldest },
      8: { status: 'provisioning', engineId: 'mysql/10.11.14', oldestRestoreMs: oldest },
      9: { status: 'degraded', engineId: 'mysql/10.11.14', oldestRestoreMs: null },
      10: { status: 'backing_up', engineId: 'mysql/10.11.14', oldestRestoreMs: oldest },
      11: { status: 'restoring', engineId: 'mysql/10.11.14', oldestRestoreMs: oldest },
    };
    const fl = { ...look, forkSource: (id: number) => sources[id], nowMs: now };
    const fork = (f: unknown) => ({ ...base, fork: f });
    expect(validateCreate(fork({ source: 7, restore_time: '2026-01-02T11:59:59' }), fl).fork).toEqual({ source: 7, restoreTimeMs: Date.UTC(2026, 0, 2, 11, 59, 59) });
    // The second now is the latest; the oldest is the earliest; zones and fractions as clients send them.
    expect(validateCreate(fork({ source: 7, restore_time: '2026-01-02T12:00:00.9Z' }), fl).fork?.restoreTimeMs).toBe(Date.UTC(2026, 0, 2, 12));
    expect(validateCreate(fork({ source: 7, restore_time: '2026-01-01T02:00:01+02:00' }), fl).fork?.restoreTimeMs).toBe(oldest);
    expect(validateCreate(base, fl).fork).toBeUndefined();
    expect(validateCreate(fork(null), fl).fork).toBeUndefined();
    expect(fields(() => validateCreate(fork({ source: 7, restore_time: '2026-01-02T12:00:01' }), fl))).toEqual(['fork.restore_time']);
    expect(fields(() => validateCreate(fork({ source: 7, restore_time: '2026-01-01T00:00:00' }), fl))).toEqual(['fork.restore_time']);
    expect(fields(() => validateCreate(fork({ source: 7, restore_time: 1767225601 }), fl))).toEqual(['fork.restore_time']);
    expect(fields(() => validateCreate(fork({ source: 6, restore_time: '2026-01-02T11:00:00' }), fl))).toEqual(['fork.source']);
    expect(fields(() => validateCreate(fork({ source: 8, restore_time: '2026-01-02T11:00:00' }), fl))).toEqual(['fork.source']);
    expect(fields(() => validateCreate(fork({ source: 9, restore_time: '2026-01-02T11:00:00' }), fl))).toEqual(['fork.source']);
    // A snapshot in progress does not stop a fork; a restore replacing the data does.
    expect(validateCreate(fork({ source: 10, restore_time: '2026-01-02T11:00:00' }), fl).fork?.source).toBe(10);
    expect(fields(() => validateCreate(fork({ source: 11, restore_time: '2026-01-02T11:00:00' }), fl))).toEqual(['fork.source']);
    expect(fields(() => validateCreate(fork({ source: '7', restore_time: '2026-01-02T11:00:00' }), fl))).toEqual(['fork.source']);
    expect(fields(() => validateCreate({ ...fork({ source: 7, restore_time: '2026-01-02T11:00:00' }), engine: 'mysql/10.11.9' }, { ...fl, engineExists: () => true }))).toEqual(['engine']);
    expect(fields(() => validateCreate(fork([7]), fl))).toEqual(['fork']);
    expect(parseRestoreTime('2026-01-02 03:04:05')).toBe(Date.UTC(2026, 0, 2, 3, 4, 5));
    for (const bad of ['2026-01-02', 'yesterday', '2026-13-02T03:04:05', '', null]) expect(parseRestoreTime(bad), String(bad)).toBeUndefined();
  });

  it('reads a fork\'s restore time under "-" as linodego writes it, and forks at the latest second when none is sent', () => {
    const now = Date.UTC(2026, 0, 2, 12, 0, 0, 500);
    const oldest = Date.UTC(2026, 0, 1, 0, 0, 1);
    const sources: Record<number, { status: string; engineId: string; oldestRestoreMs: number | null }> = {
      7: { status: 'active', engineId: 'mysql/10.11.14', oldestRestoreMs: oldest },
      9: { status: 'active', engineId: 'mysql/10.11.14', oldestRestoreMs: null },
    };
    const fl = { ...look, forkSource: (id: number) => sources[id], nowMs: now };
    const fork = (f: unknown) => validateCreate({ ...base, fork: f }, fl).fork;
    // Go's RFC 3339 forms: UTC with Z, a fraction, a zone offset.
    expect(fork({ source: 7, '-': '2026-01-02T03:04:05Z' })).toEqual({ source: 7, restoreTimeMs: Date.UTC(2026, 0, 2, 3, 4, 5) });
    expect(fork({ source: 7, '-': '2026-01-02T03:04:05.123456789Z' })?.restoreTimeMs).toBe(Date.UTC(2026, 0, 2, 3, 4, 5));
    expect(fork({ source: 7, '-': '2026-01-02T05:04:05+02:00' })?.restoreTimeMs).toBe(Date.UTC(2026, 0, 2, 3, 4, 5));
    // restore_time, the documented key, wins over "-".
    expect(fork({ source: 7, restore_time: '2026-01-02T10:00:00', '-': '2026-01-02T03:04:05Z' })?.restoreTimeMs).toBe(Date.UTC(2026, 0, 2, 10));
    expect(fork({ source: 7, restore_time: null, '-': '2026-01-02T03:04:05Z' })?.restoreTimeMs).toBe(Date.UTC(2026, 0, 2, 3, 4, 5));
    // No time at all (a nil time in linodego, only fork_source in Terraform): the second now,
    // through its end (what was committed earlier in it is not left out).
    for (const f of [{ source: 7 }, { source: 7, '-': null }, { source: 7, restore_time: null }]) {
      expect(fork(f), JSON.stringify(f)).toEqual({ source: 7, restoreTimeMs: Date.UTC(2026, 0, 2, 12), throughSecond: true });
    }
    // Bad values under "-" are named fork.restore_time, as under restore_time.
    for (const bad of ['yesterday', 1767225601, '2026-01-02', true, {}]) {
      expect(fields(() => fork({ source: 7, '-': bad })), JSON.stringify(bad)).toEqual(['fork.restore_time']);
    }
    expect(fields(() => fork({ source: 7, '-': '2025-12-31T23:59:59Z' }))).toEqual(['fork.restore_time']);
    expect(fields(() => fork({ source: 7, '-': '2026-01-02T12:00:01Z' }))).toEqual(['fork.restore_time']);
    // The latest second needs a source with history like any other.
    expect(fields(() => fork({ source: 9 }))).toEqual(['fork.source']);
  });

  it('applies defaults: 1 node, none; 3 nodes, semi_synch; ssl on; not encrypted', () => {
    expect(validateCreate(base, look)).toMatchObject({ clusterSize: 1, replicationType: 'none', sslConnection: true, encrypted: false, allowList: [] });
    expect(validateCreate({ ...base, cluster_size: 3 }, look)).toMatchObject({ clusterSize: 3, replicationType: 'semi_synch' });
    expect(validateCreate({ ...base, cluster_size: 3, replication_type: 'asynch' }, look).replicationType).toBe('asynch');
  });

  it('ties replication_type to cluster_size and reports several errors at once', () => {
    expect(fields(() => validateCreate({ ...base, cluster_size: 3, replication_type: 'none' }, look))).toEqual(['replication_type']);
    expect(fields(() => validateCreate({ ...base, replication_type: 'asynch' }, look))).toEqual(['replication_type']);
    expect(fields(() => validateCreate({ ...base, cluster_size: 2, replication_type: 'none' }, look))).toEqual(['cluster_size']);
    expect(fields(() => validateCreate({ ...base, cluster_size: '3' }, look))).toEqual(['cluster_size']);
    expect(fields(() => validateCreate({ label: 'taken', engine: 'mysql/5.7', region: 'x', type: 'y', allow_list: ['x'] }, look)).sort())
      .toEqual(['allow_list[0]', 'engine', 'label', 'region', 'type']);
  });

  it('checks the updates window rules', () => {
    const cur = defaultUpdates();
    const run = (u: unknown) => {
      const errs = new ErrorCollector();
      const out = validateUpdates(errs, u, cur);
      return { out, fields: errs.errors.map((e) => e.field) };
    };
    expect(run({ frequency: 'monthly', week_of_month: 4, day_of_week: 1, hour_of_day: 23, duration: 1 }).out).toEqual({ frequency: 'monthly', week_of_month: 4, day_of_week: 1, hour_of_day: 23, duration: 1 });
    expect(run({ frequency: 'monthly' }).fields).toEqual(['updates.week_of_month']);
    expect(run({ week_of_month: 2 }).fields).toEqual(['updates.week_of_month']);
    expect(run({ duration: 3.5 }).fields).toEqual(['updates.duration']);
    expect(run({ hour_of_day: -1, day_of_week: 7 }).fields).toEqual(['updates.hour_of_day']);
    expect(run({ day_of_week: null }).fields).toEqual(['updates.day_of_week']);
    expect(cur.day_of_week).toBe(7);
  });

  it('takes version and cluster_size as clients send them: unchanged is no change, upgrades only, 1 <-> 3 a scale', () => {
    const series: Record<string, string> = { '11.8': 'mysql/11.8.9', '10.11': 'mysql/10.11.9' };
    const u = {
      labelTaken: () => false, typeDisk: () => 25600, currentType: 'g6-nanode-1', currentUpdates: defaultUpdates(),
      currentClusterSize: 3, currentVersion: '10.11.9', currentEngineId: 'mysql/10.11.9',
      engineForVersion: (v: string) => (['10.11.9', '10.11.14', '10.6.1'].includes(v) ? `mysql/${v}` : series[v]),
    };
    expect(validateUpdate({ version: '10.11.9', cluster_size: 3 }, u)).toEqual({});
    expect(validateUpdate({ version: '10.11.14' }, u)).toEqual({ engineId: 'mysql/10.11.14' });
    // A series names its newest build; the database's own series is no change.
    expect(validateUpdate({ version: '11.8' }, u)).toEqual({ engineId: 'mysql/11.8.9' });
    expect(validateUpdate({ version: '10.11' }, u)).toEqual({});
    expect(fields(() => validateUpdate({ version: '10.6.1' }, u))).toEqual(['version']);
    expect(fields(() => validateUpdate({ version: '12.0' }, u))).toEqual(['version']);
    // Listed because another agent runs it, but not by the agents of this database.
    expect(fields(() => validateUpdate({ version: '11.8' }, { ...u, engineUsable: (id: string) => id !== 'mysql/11.8.9' }))).toEqual(['version']);
    expect(fields(() => validateUpdate({ version: 11 }, u))).toEqual(['version']);
    expect(validateUpdate({ cluster_size: 1 }, u)).toEqual({ clusterSize: 1 });
    expect(validateUpdate({ cluster_size: 3 }, { ...u, currentClusterSize: 1 })).toEqual({ clusterSize: 3 });
    expect(fields(() => validateUpdate({ cluster_size: 2 }, u))).toEqual(['cluster_size']);
    expect(fields(() => validateUpdate({ cluster_size: 1 }, { ...u, spansAgents: true }))).toEqual(['cluster_size']);
    expect(validateUpdate({ cluster_size: 3 }, { ...u, spansAgents: true })).toEqual({});
    // What needs a rolling restart is accepted for a cluster spread over hosts too (the control
    // plane rolls it out member by member, rollout.ts), and needsRollingRestart says which it is.
    const spread = { ...u, spansAgents: true, currentEngineConfig: {} };
    const before = { type: 'g6-nanode-1', engineId: 'mysql/10.11.9', engineConfig: {} };
    const upgrade = validateUpdate({ version: '11.8' }, spread);
    expect(upgrade).toEqual({ engineId: 'mysql/11.8.9' });
    expect(needsRollingRestart(before, upgrade)).toBe(true);
    const resize = validateUpdate({ type: 'g6-standard-2' }, { ...spread, typeDisk: (t: string) => (t === 'g6-nanode-1' ? 25600 : 51200) });
    expect(resize).toEqual({ type: 'g6-standard-2' });
    expect(needsRollingRestart(before, resize)).toBe(true);
    const restartKey = validateUpdate({ engine_config: { mysql: { innodb_ft_min_token_size: 2 } } }, spread);
    expect(needsRollingRestart(before, restartKey)).toBe(true);
    expect(needsRollingRestart({ ...before, engineConfig: restartKey.engineConfig! }, restartKey)).toBe(false);
    const live = validateUpdate({ engine_config: { mysql: { connect_timeout: 20 } } }, spread);
    expect(live.engineConfig).toMatchObject({ mysql: { connect_timeout: 20 } });
    expect(needsRollingRestart(before, live)).toBe(false);
    expect(needsRollingRestart(before, { type: before.type, engineId: before.engineId })).toBe(false);
    expect(fields(() => validateUpdate({ cluster_size: '1' }, u))).toEqual(['cluster_size']);
    expect(compareVersions('10.11.9', '10.11.14')).toBe(-1);
    expect(compareVersions('10.11', '10.11.0')).toBe(0);
  });

  it('resizes only to a plan with more disk and never together with allow_list', () => {
    const disks: Record<string, number> = { 'g6-nanode-1': 25600, 'g6-standard-1': 51200, 'g6-standard-2': 81920 };
    const u = { labelTaken: () => false, typeDisk: (t: string) => disks[t], currentType: 'g6-standard-1', currentUpdates: defaultUpdates() };
    expect(validateUpdate({ type: 'g6-standard-2' }, u)).toEqual({ type: 'g6-standard-2' });
    expect(validateUpdate({ type: 'g6-standard-1' }, u)).toEqual({});
    expect(fields(() => validateUpdate({ type: 'g6-nanode-1' }, u))).toEqual(['type']);
    expect(fields(() => validateUpdate({ type: 'g6-standard-2', allow_list: [] }, u))).toEqual(['type']);
    expect(fields(() => validateUpdate({ engine: 'mysql/8', region: 'x' }, u))).toEqual(['engine', 'region']);
  });

  it('checks snapshot labels and targets', () => {
    const l = { labelTaken: (x: string) => x === 'dup', clusterSize: 3 };
    expect(validateSnapshot({ label: 'A_1' }, l)).toEqual({ label: 'A_1', target: 'primary' });
    expect(validateSnapshot({ label: 'x'.repeat(30), target: 'secondary' }, l).target).toBe('secondary');
    for (const bad of [{}, { label: '' }, { label: 'x'.repeat(31) }, { label: 'a-b' }, { label: 'dup' }, { label: 7 }]) {
      expect(fields(() => validateSnapshot(bad, l)), JSON.stringify(bad)).toEqual(['label']);
    }
    expect(fields(() => validateSnapshot({ label: 'ok', target: 'secondary' }, { ...l, clusterSize: 1 }))).toEqual(['target']);
  });
});
