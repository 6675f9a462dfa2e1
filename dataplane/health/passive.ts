import type { ConfigSpec } from '../config/model.js';
import type { NodeState } from '../runtime/node-state.js';

/**
 * A final response status that counts against the node (HAProxy's `observe layer7`): a 5xx,
 * except 501 and 505, which say the request asked for something the server does not do.
 */
export function isFailureStatus(status: number): boolean {
  return status >= 500 && status !== 501 && status !== 505;
}

/**
 * Passive check (`check_passive`): does a failure seen on real traffic take `node` DOWN now?
 * When it does, the node's counts restart as if `check_attempts` probes had failed, so it comes
 * back by the same rise rule as after active checks (health/rise-fall.ts).
 */
export function passiveMarksDown(spec: ConfigSpec, node: NodeState): boolean {
  if (!spec.checkPassive || node.retired || node.status === 'DOWN') return false;
  node.fails = spec.checkAttempts;
  node.passes = 0;
  return true;
}
