/**
 * Runs one agent as its own OS process for the e2e tests (so it can be SIGKILLed), like
 * `fulcrum agent` but with a node address pool of the test's own, so that concurrent agents on
 * this host never race for the same 127.79.x.y:3306.
 * Usage: node --import tsx agent-process.ts <id> <region> <control-plane> <stateDir> <runtime> <nodePool>
 */
import { startAgent } from '../../../agent/main.js';

const [id, region, controlPlane, stateDir, runtime, nodeAddressPool] = process.argv.slice(2);
if (!id || !region || !controlPlane || !stateDir || (runtime !== 'process' && runtime !== 'docker') || !nodeAddressPool) {
  console.error('usage: agent-process.ts <id> <region> <control-plane> <stateDir> <process|docker> <nodePool>');
  process.exit(2);
}
const agent = await startAgent({ id, region, controlPlane, stateDir, runtime, nodeAddressPool });
const stop = () => void agent.close().then(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
