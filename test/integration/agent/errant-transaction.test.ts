/**
 * Errant transactions are reported, never dropped in silence (docs/databases.md, "Clusters across
 * hosts"; docs/agent.md §7), with real MariaDB servers and the process runtime: the primary's
 * replication link is cut (iptables drops TCP to and from its replication port; the agent and
 * the test's one cut-off write reach it over its Unix socket, so they are unaffected), a row is
 * committed on it that no replica receives, the primary dies, a replica is promoted, and the agent reports the missing
 * transaction's GTID in a failed `database_failover` event before the old node is rebuilt and the
 * cluster is active with three members again.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningAgent } from '../../../agent/main.js';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { withAdmin, q } from '../../../agent/mysql/admin.js';
import { databaseDir } from '../../../agent/database/state.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, desiredDb, testNet, type Driver } from './control-plane-driver.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';

/** iptables rules of this file, tagged so that cleanup removes exactly these. */
const TAG = 'fulcrum-mh-cluster-errant';

function cutRules(address: string): string[][] {
  return [
    ['OUTPUT', '-p', 'tcp', '-d', address, '--dport', '3306', '-m', 'comment', '--comment', TAG, '-j', 'DROP'],
    ['OUTPUT', '-p', 'tcp', '-s', address, '--sport', '3306', '-m', 'comment', '--comment', TAG, '-j', 'DROP'],
  ];
}

/** Removes every rule tagged with TAG (also leftovers of an interrupted run). */
function removeCut(): void {
  const rules = execFileSync('iptables', ['-S', 'OUTPUT'], { encoding: 'utf8' }).split('\n').filter((l) => l.includes(TAG));
  for (const rule of rules) execFileSync('iptables', ['-D', ...rule.replace(/^-A /, '').match(/"[^"]*"|\S+/g)!.map((x) => x.replace(/^"|"$/g, ''))]);
}

describe('agent: an errant transaction on a failed primary', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let agent: RunningAgent;
  let db: DesiredDatabase;
  const net = testNet('127.78', 33);
  const connect = (host: string) =>
    connectFrom({ source: '127.0.0.5', host, port: 3306, user: 'linroot', password: 'Initial.Pass_01', ca: driver.db(44)!.caCertPem });

  beforeAll(async () => {
    removeCut();
    fx = await createAgentFixture({ id: 'agent-errant', slot: 33 });
    driver = fx.driver;
    agent = await fx.startAgent();
    const [engine] = await detectLocalCatalogue();
    db = desiredDb({
      id: 44, engineId: engine!.id, version: engine!.version, clusterSize: 3, replicationType: 'semi_synch',
      hostPrimary: `${net}.1`, hostSecondary: `${net}.2`, allowList: ['127.0.0.0/24'],
    });
  });

  afterAll(async () => {
    removeCut();
    await fx?.close();
  });

  it('reports the old primary\'s transaction the new primary lacks, with its GTID, then heals to three members', async () => {
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(44)?.status === 'active' && driver.db(44), 60_000, 'active');
    const w = await connect(db.hostPrimary!);
    await w.query('CREATE DATABASE app');
    await w.query('CREATE TABLE app.t (id INT PRIMARY KEY)');
    await w.query('INSERT INTO app.t VALUES (1)');
    // Closed before the cut: clients reach the primary through the data plane over TCP, which the
    // cut drops too (docs/databases.md, "Database endpoints").
    await w.end();

    const c = agent.agent.database(44)!;
    const oldPrimary = c.state!.primary;
    const address = c.state!.addresses[oldPrimary - 1]!;
    for (const rule of cutRules(address)) execFileSync('iptables', ['-I', ...rule]);
    // Written around the fencing: semi-sync off for this one commit, so it is acknowledged while
    // no replica can receive it (what a cut-off primary with an asynchronous fallback does).
    // The write goes over the node's Unix socket, which the cut leaves alone.
    await withAdmin(await c.adminTarget(oldPrimary), async (x) => {
      await x.query('SET GLOBAL rpl_semi_sync_master_enabled=OFF');
      await x.query('INSERT INTO app.t VALUES (666)');
    });
    const gtid = await withAdmin(await c.adminTarget(oldPrimary), async (x) => String((await q(x, 'SELECT @@gtid_current_pos AS g'))[0].g));
    const seq = Number(gtid.split('-')[2]);
    // The agent has seen the old primary at that position before it dies.
    await driver.waitFor(() => driver.db(44)!.nodes.some((n) => n.role === 'primary' && n.gtidCurrentPos === gtid), 10_000, 'position observed');
    await agent.runtime.kill(c.nodeName(oldPrimary));

    const errant = await driver.waitFor(() => driver.db(44)!.events.find((e) => e.action === 'database_failover' && e.status === 'failed'), 30_000, 'errant transaction reported');
    console.log(errant.message);
    expect(errant.message).toContain(`node ${oldPrimary} had GTIDs 0-${oldPrimary}-${seq} `);
    expect(errant.message).toContain('never received');
    removeCut();
    expect(c.state!.primary).not.toBe(oldPrimary);

    // The report is true: the new primary does not have the row, and it was not silently merged.
    await driver.waitFor(() => driver.db(44)?.status === 'active' && Object.keys(driver.db(44)!.members).length === 3 && driver.db(44), 60_000, 'active with three members');
    const r = await connect(db.hostPrimary!);
    const [rows] = await r.query('SELECT id FROM app.t ORDER BY id');
    expect((rows as any[]).map((x) => x.id)).toEqual([1]);
    await r.end();
    expect(Object.values(driver.db(44)!.members).sort()).toEqual(['failover', 'failover', 'primary']);

    // Kept, not dropped: the old node's binlog events after the new primary's position, in a 0600 file.
    const dir = join(databaseDir(fx.stateDir, 44), 'errant');
    const files = readdirSync(dir);
    expect(files).toEqual([`node${oldPrimary}-0-${oldPrimary}-${seq}.sql`]);
    const kept = readFileSync(join(dir, files[0]!), 'utf8');
    expect(statSync(join(dir, files[0]!)).mode & 0o777).toBe(0o600);
    expect(kept).toContain(`GTID 0-${oldPrimary}-${seq}`);
    expect(kept).toMatch(/INSERT INTO `app`.`t`[\s\S]*@1=666/);
    expect(kept).not.toMatch(/@1=1\b/);
    expect(driver.db(44)!.events.filter((e) => e.message.includes('could not be saved'))).toEqual([]);
  });
});
