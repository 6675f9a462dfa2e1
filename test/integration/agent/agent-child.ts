/**
 * Runs one agent as its own OS process for tests that kill it with SIGKILL (started by
 * agent-fixture.ts's spawnAgent). Configuration comes from the environment.
 */
import { readFileSync } from 'node:fs';
import { silentLogger } from '../../../lib/logger.js';
import { startAgent } from '../../../agent/main.js';
import { loadStoreCredentials, parseStoreUrl } from '../../../agent/backup/s3-store.js';

// An object store as the backup store: its URL, endpoint and the files of its CA and keys
// (never the keys themselves in the environment).
const e = process.env;
const backupStore = e.BACKUP_STORE
  ? {
    ...parseStoreUrl(e.BACKUP_STORE), endpoint: e.BACKUP_STORE_ENDPOINT, region: 'us-east-1', pathStyle: true,
    ca: readFileSync(e.BACKUP_STORE_CA!, 'utf8'), credentials: loadStoreCredentials(e.BACKUP_STORE_CREDENTIALS!),
  }
  : undefined;

await startAgent({
  id: process.env.AGENT_ID ?? 'agent-child',
  region: 'us-east',
  controlPlane: process.env.CONTROL_PLANE!,
  // The test's control plane is a stand-in driver without TLS.
  insecureGrpc: true,
  stateDir: process.env.STATE_DIR!,
  runtime: 'process',
  nodeAddressPool: process.env.NODE_POOL,
  logger: silentLogger(),
  heartbeatMs: 500,
  reconcileIntervalMs: 500,
  ...(backupStore ? { backupStore } : {}),
  ...(e.BINLOG_ARCHIVE_MS ? { binlogArchiveMs: Number(e.BINLOG_ARCHIVE_MS) } : {}),
});
process.stdout.write('ready\n');
