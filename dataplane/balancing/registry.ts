import type { Algorithm } from '../config/model.js';
import type { BalancingPolicy } from './picker.js';
import { roundRobinPolicy } from './roundrobin.js';
import { leastConnPolicy } from './leastconn.js';
import { sourcePolicy } from './source.js';
import { ringHashPolicy } from './ring-hash.js';

/**
 * The policy for each `algorithm` value. A new policy is one file beside this one implementing
 * `BalancingPolicy` (picker.ts) and one line here; picker.ts itself imports no policy.
 */
export const policies: Readonly<Record<Algorithm, BalancingPolicy>> = Object.freeze({
  roundrobin: roundRobinPolicy,
  leastconn: leastConnPolicy,
  source: sourcePolicy,
  ring_hash: ringHashPolicy,
});
