/**
 * MariaDB servers of this machine's mariadb-server, run by the process runtime as the agent runs
 * a member (its rendered config, TLS files and init SQL), for tests that drive agent code against
 * real servers without an agent.
 */
import { join } from 'node:path';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import type { AdminTarget } from '../../../agent/mysql/admin.js';
import { renderNodeConfig } from '../../../agent/mysql/config-render.js';
import { renderInitSql } from '../../../agent/mysql/init-sql.js';
import { ensureClusterTls } from '../../../agent/mysql/tls.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';
import { freePort } from '../../helpers/tcp.js';

export interface LocalServer { name: string; port: number; admin: AdminTarget }

export interface LocalServers {
  /** The CA of every server's certificate (clients verify the servers with it). */
  caPem: string;
  /** Starts (or finds running) server `name` as member `index` of database 1, on a free port of 127.0.0.1. */
  start(name: string, index?: number): Promise<LocalServer>;
}

/** The local engine and one CA under `root`; fails when mariadb-server is not installed. */
export async function localServers(o: { rt: ContainerRuntime; root: string; adminPassword: string; replPassword: string }): Promise<LocalServers> {
  const [engine] = await detectLocalCatalogue();
  if (!engine) throw new Error('no local mariadbd found: the process runtime needs mariadb-server installed');
  const tls = await ensureClusterTls(join(o.root, 'tls'), 1, ['127.0.0.1']);
  return {
    caPem: tls.caPem,
    async start(name, index = 1) {
      const port = await freePort();
      await o.rt.ensure({
        name, labels: {}, engine, dataDir: join(o.root, name, 'data'), host: '127.0.0.1', port, memoryMb: 256, cpus: 1,
        config: renderNodeConfig({ databaseId: 1, index, memoryMb: 256, semiSync: false, ssl: true, encrypted: false }),
        files: { 'ca.pem': tls.caPem, 'server.pem': tls.serverCertPem, 'server-key.pem': tls.serverKeyPem, 'init.sql': renderInitSql({ adminPassword: o.adminPassword, replPassword: o.replPassword }) },
      });
      return { name, port, admin: { socketPath: (await o.rt.connection(name)).socketPath, password: o.adminPassword } };
    },
  };
}
