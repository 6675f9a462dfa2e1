import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { migrations, migrationSql, type Dialect } from '../../../control-plane/store/common/migrations.js';

// What each released migration runs, per dialect: the SQL with comments and runs of white space
// folded (sha256, first 16 hex digits). An install that upgrades has applied these already and
// a new one must get the same schema, so a released migration never changes: a change to the
// schema is a new migration, appended (docs/architecture.md, "The store"). The values were taken
// from the two lists the stores kept before they shared one.
const released: Record<string, Record<Dialect, string>> = {
  '001-core': { sqlite: 'a44a2e1761d98e0f', postgres: '30da043a74b79a0c' },
  '050-fleet-pki': { sqlite: '6e267ee433cb27a6', postgres: '26e2e45f40f79bb4' },
  '101-nodebalancers': { sqlite: '51311df71e7f1461', postgres: '3075a3a2e31dfd9d' },
  '102-id-sequences': { sqlite: '31f33ed9c07dd5f5', postgres: '8a36f431485e1420' },
  '103-nb-indexes': { sqlite: '4b23ffbfe8ecdbf7', postgres: '4b23ffbfe8ecdbf7' },
  '104-nb-udp-types': { sqlite: 'cc79daece14a0e30', postgres: 'd7884ecfd471c54a' },
  '150-nb-ipv6': { sqlite: '99765d7b202b14ad', postgres: '99765d7b202b14ad' },
  '201-databases': { sqlite: '946d0cd402a28c34', postgres: '5f47ba55bfc6e019' },
  '202-databases-current': { sqlite: '13bcfd0970b9fdf4', postgres: '41dcd7620d9a68f5' },
  '210-database-members': { sqlite: '458c17e645a822e4', postgres: '27023321a7c731d9' },
  '211-cluster-secrets': { sqlite: '62d0a0d93129d84b', postgres: '62d0a0d93129d84b' },
  '220-database-pitr': { sqlite: 'e2adbc7f20d4eae9', postgres: '9afaf6dfbfbc9228' },
  '240-database-id-sequence': { sqlite: 'b31d126008b4bdc7', postgres: 'b31d126008b4bdc7' },
  '241-database-live-labels': { sqlite: '484973367981171d', postgres: '484973367981171d' },
  '250-database-backup-slots': { sqlite: '89e5884b8f852a39', postgres: 'c33e774ddde15117' },
  '251-database-member-reports': { sqlite: '8f9a498744fc4682', postgres: 'ce5b0a36c304520a' },
  '260-host-stream-replica': { sqlite: '9909d76981ddfbff', postgres: '8fe531afd78d13b5' },
  '271-fleet-removed-hosts': { sqlite: 'e5056ed6f15812f6', postgres: 'f85532d8154ec75b' },
  '280-profile-preferences': { sqlite: '2365ca9fad327d72', postgres: '2365ca9fad327d72' },
};

const fingerprint = (sql: string) =>
  createHash('sha256').update(sql.replace(/--[^\n]*/g, '').replace(/\s+/g, ' ').trim()).digest('hex').slice(0, 16);

describe('the one migration list', () => {
  it('keeps every released migration as it was, in both dialects', () => {
    const now = Object.fromEntries(migrations.filter((m) => m.id in released)
      .map((m) => [m.id, { sqlite: fingerprint(migrationSql(m, 'sqlite')), postgres: fingerprint(migrationSql(m, 'postgres')) }]));
    expect(now).toEqual(released);
  });

  it('has unique ids, listed in the order they apply', () => {
    const ids = migrations.map((m) => m.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toEqual([...ids].sort());
  });

  it("writes PostgreSQL's SQL in its own types", () => {
    for (const m of migrations) {
      const pg = migrationSql(m, 'postgres');
      expect(pg, m.id).not.toMatch(/\bINTEGER\b|\bREAL\b/);
      // SQLite's INTEGER PRIMARY KEY is its rowid: the SQLite text is left as written.
      expect(migrationSql(m, 'sqlite'), m.id).not.toMatch(/\bBIGINT\b|GENERATED/);
    }
  });
});
