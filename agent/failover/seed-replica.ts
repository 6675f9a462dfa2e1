import { PassThrough } from 'node:stream';
import { syncAdminAccounts } from '../mysql/accounts.js';
import { withAdmin, type AdminTarget } from '../mysql/admin.js';
import { clientError, customerAccountsSql, customerSchemas } from '../mysql/customer-data.js';
import type { ContainerRuntime } from '../runtime/container-runtime.js';

export interface SeedNode {
  name: string;
  admin: AdminTarget;
}

/**
 * Seeds a fresh node from a consistent dump of `source` when the source's binlog no longer
 * starts at the first GTID (purged), so replaying it cannot rebuild the node. The dump carries
 * its GTID position (`--master-data=1 --gtid` sets gtid_slave_pos), everything is loaded with
 * the binlog off (the node must not invent GTIDs of its own), and linroot is re-created from the
 * desired state. The caller then points the node at the primary with MASTER_USE_GTID=slave_pos.
 */
export async function seedFromDump(opts: {
  runtime: ContainerRuntime;
  source: SeedNode;
  target: SeedNode;
  adminPassword: string;
  allowList: string[];
  linrootPassword: string;
}): Promise<void> {
  const { schemas, accounts } = await withAdmin(opts.source.admin, async (c) => ({
    schemas: await customerSchemas(c),
    accounts: await customerAccountsSql(c),
  }));
  await withAdmin(opts.target.admin, async (c) => {
    await c.query('STOP SLAVE');
    await c.query('RESET SLAVE ALL');
  });
  const what = schemas.length > 0
    ? ['--routines', '--triggers', '--events', '--hex-blob', '--databases', ...schemas]
    : ['--no-create-db', '--no-create-info', '--no-data', '--skip-triggers', '--databases', 'mysql'];
  const dump = new PassThrough();
  const feed = new PassThrough();
  feed.write('SET SESSION sql_log_bin=0;\n');
  feed.write(accounts);
  dump.pipe(feed);
  const env = { MYSQL_PWD: opts.adminPassword };
  const dumping = opts.runtime.exec(opts.source.name, ['mariadb-dump', '--user=root', '--single-transaction', '--master-data=1', '--gtid', ...what], { stdout: dump, env });
  const load = await opts.runtime.exec(opts.target.name, ['mariadb', '--user=root', '--binary-mode'], { stdin: feed, env });
  // A load that stopped early must not leave the dump blocked on a full pipe.
  if (load.exitCode !== 0) dump.destroy();
  const out = await dumping;
  if (load.exitCode !== 0) throw new Error(`seeding load failed: ${clientError(load.stderr)}`);
  if (out.exitCode !== 0) throw new Error(`seeding dump failed: ${clientError(out.stderr)}`);
  await withAdmin(opts.target.admin, async (c) => {
    await c.query('SET SESSION sql_log_bin=0');
    await syncAdminAccounts(c, opts.allowList, opts.linrootPassword);
  });
}
