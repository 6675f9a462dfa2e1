/**
 * Runs one agent as its own OS process for tests that kill it with SIGKILL (started by
 * agent-fixture.ts's spawnAgent). Configuration comes from the environment.
 */
import { silentLogger } from '../../../lib/logger.js';
import { startAgent } from '../../../agent/main.js';

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
});
process.stdout.write('ready\n');
