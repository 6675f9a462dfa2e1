import { createPrivateKey, X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openDatabase } from '../../../control-plane/store/sqlite/database.js';
import { sqliteDatabaseRepository } from '../../../control-plane/store/sqlite/database-repository.js';
import type { DatabaseRecord } from '../../../control-plane/domain/databases/model.js';
import { placeDatabases } from '../../../control-plane/domain/databases/placement.js';

const record = (agentId: string | null, clusterSize: 1 | 3): Omit<DatabaseRecord, 'id'> => ({
  label: `db-${clusterSize}-${agentId}`, region: 'us-east', type: 'g6-nanode-1', engineId: 'mysql/10.11.14', version: '10.11.14', image: '', binary: '',
  clusterSize, replicationType: clusterSize === 3 ? 'semi_synch' : 'none', encrypted: false, sslConnection: true, allowList: [],
  updates: { frequency: 'weekly', duration: 3, hour_of_day: 0, day_of_week: 7, week_of_month: null }, status: 'active',
  hostPrimary: '127.78.0.1', hostSecondary: '127.78.0.2', port: 3306, provisioned: true, members: {}, caCert: null, usedDiskMb: null, patchPending: false, engineConfig: {}, secondEventId: null,
  rootPassword: 'x'.repeat(16), nextPassword: null, generation: 1, convergedGeneration: 1, runState: 'running', agentId, term: 1,
  primaryMember: 1, pendingEventId: null, deleting: false, deleteEventId: null, lastError: null, created: 0, updated: 0,
});

/** The member placement table of migration 210 on a real SQLite file. */
describe('member placement in the store', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  const file = () => {
    const dir = mkdtempSync(join(tmpdir(), 'fulcrum-mh-cluster-store-'));
    dirs.push(dir);
    return join(dir, 'cp.db');
  };

  it('stores each member\'s agent, the term and the primary member, and keeps them across a reopen', async () => {
    const path = file();
    let db = openDatabase(path);
    let repo = sqliteDatabaseRepository(db);
    const row = await repo.create(record(null, 3));
    await repo.setMembers(row.id, ['a', 'b', 'c']);
    await repo.update(row.id, { agentId: 'a', term: 4, primaryMember: 3 });
    db.close();
    db = openDatabase(path);
    repo = sqliteDatabaseRepository(db);
    expect((await repo.members(row.id)).map((m) => [m.member, m.agentId])).toEqual([[1, 'a'], [2, 'b'], [3, 'c']]);
    expect((await repo.get(row.id))).toMatchObject({ agentId: 'a', term: 4, primaryMember: 3 });
    expect((await repo.members()).length).toBe(3);
    // Purging a database removes its placements.
    await repo.purge(row.id);
    expect((await repo.members())).toEqual([]);
    db.close();
  });

  it('gives a cluster spread over agents its own CA and replication password, sealed at rest; a cluster on one agent none', async () => {
    const path = file();
    const db = openDatabase(path);
    const repo = sqliteDatabaseRepository(db);
    const spread = await repo.create(record(null, 3));
    const agents = ['a', 'b', 'c'].map((id) => ({ id, region: 'us-east', membersAcrossHosts: true }));
    await placeDatabases(repo, agents);
    const secrets = (await repo.get(spread.id))!.clusterSecrets!;
    expect(new X509Certificate(secrets.caCertPem).ca).toBe(true);
    expect(createPrivateKey(secrets.caKeyPem).asymmetricKeyType).toBe('ec');
    expect(secrets.replPassword.length).toBeGreaterThanOrEqual(20);
    const raw = db.prepare('SELECT cluster_secrets FROM databases WHERE id = ?').pluck().get(spread.id) as string;
    expect(raw.startsWith('fkek1:')).toBe(true);
    expect(raw).not.toContain('PRIVATE KEY');
    expect(raw).not.toContain(secrets.replPassword);
    const whole = await repo.create({ ...record(null, 3), label: 'db-3-whole' });
    await placeDatabases(repo, [{ id: 'solo', region: 'us-east' }]);
    expect((await repo.get(whole.id))!.clusterSecrets).toBeNull();
    db.close();
  });

  it('gives databases placed before the migration every member on their one agent', async () => {
    const path = file();
    let db = openDatabase(path);
    let repo = sqliteDatabaseRepository(db);
    const three = await repo.create(record('old-agent', 3));
    const one = await repo.create(record('old-agent', 1));
    const unplaced = await repo.create(record(null, 3));
    // Back to the schema before migration 210, with these rows in it.
    db.exec(`DROP TABLE database_members;
      ALTER TABLE databases DROP COLUMN term; ALTER TABLE databases DROP COLUMN primary_member;
      ALTER TABLE database_agents DROP COLUMN members_across_hosts;
      DELETE FROM schema_migrations WHERE id = '210-database-members';`);
    db.close();
    db = openDatabase(path);
    repo = sqliteDatabaseRepository(db);
    expect((await repo.members(three.id)).map((m) => [m.member, m.agentId])).toEqual([[1, 'old-agent'], [2, 'old-agent'], [3, 'old-agent']]);
    expect((await repo.members(one.id)).map((m) => [m.member, m.agentId])).toEqual([[1, 'old-agent']]);
    expect((await repo.members(unplaced.id))).toEqual([]);
    expect((await repo.get(three.id))).toMatchObject({ term: 1, primaryMember: 1 });
    db.close();
  });
});
