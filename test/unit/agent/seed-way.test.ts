import { describe, expect, it } from 'vitest';
import { seedAfterPurge } from '../../../agent/database/dump-seed.js';
import { replicationUserIntact } from '../../../agent/mysql/accounts.js';
import { renderInitSql } from '../../../agent/mysql/init-sql.js';

// Which way seeds a member once the primary has refused the binlog it needs (docs/multi-host.md,
// "How a new member is seeded"), and the replication account's right to copy the primary.
describe('seedAfterPurge', () => {
  const primary = { host: '198.18.1.2', port: 3306, password: 'p', caPem: 'ca' };

  it('copies the primary over TLS when a member across hosts has no base and the binlog is purged', () => {
    expect(seedAfterPurge({ spread: true, primary })).toEqual({ way: 'copy' });
  });

  it('dumps the primary over its socket on one host', () => {
    expect(seedAfterPurge({ spread: false, primary: undefined })).toEqual({ way: 'dump' });
  });

  it('waits for a newer base when the member was seeded from one the binlog no longer reaches', () => {
    const r = seedAfterPurge({ spread: true, primary, base: { backupId: 7, snapshotGtid: '0-1-40' } });
    expect(r.way).toBe('none');
    expect('why' in r && r.why).toContain('backup 7, 0-1-40); a newer base is needed');
  });

  it('cannot copy a primary whose address is not known yet', () => {
    const r = seedAfterPurge({ spread: true, primary: undefined });
    expect(r.way).toBe('none');
    expect('why' in r && r.why).toMatch(/address is not known yet/);
  });
});

describe('the replication account reads what a copy needs', () => {
  it('is granted SELECT, SHOW VIEW, TRIGGER and EVENT on start', () => {
    expect(renderInitSql({ adminPassword: 'a', replPassword: 'r' })).toContain("GRANT SELECT, SHOW VIEW, TRIGGER, EVENT, REPLICATION SLAVE, REPLICATION SLAVE ADMIN, REPLICA MONITOR, BINLOG MONITOR ON *.* TO 'fulcrum_repl'@'%';");
  });

  it('counts an account made before it could read as not intact, so the guard re-grants it', async () => {
    const grants = (g: string) => ({
      query: async (sql: string) => [sql.startsWith('SHOW GRANTS') ? [{ g }] : [{ pw: 1, locked: 'false' }], []],
    }) as never;
    expect(await replicationUserIntact(grants("GRANT REPLICATION SLAVE, BINLOG MONITOR, REPLICA MONITOR, REPLICATION SLAVE ADMIN ON *.* TO `fulcrum_repl`@`%`"), 'r')).toBe(false);
    expect(await replicationUserIntact(grants("GRANT SELECT, SHOW VIEW, TRIGGER, EVENT, REPLICATION SLAVE, BINLOG MONITOR, REPLICA MONITOR, REPLICATION SLAVE ADMIN ON *.* TO `fulcrum_repl`@`%`"), 'r')).toBe(true);
  });
});
