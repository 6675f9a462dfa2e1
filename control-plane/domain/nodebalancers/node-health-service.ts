import { regionServed } from '../regions.js';
import type { NodeBalancerRepository } from './repository.js';
import type { NodeStatus } from './model.js';

/**
 * Node health reaching the API: data planes report each node's transitions as they happen, and
 * the last one is the node's `status` (and its Config's `nodes_status`). Only UP and DOWN are
 * reports; a node stays `unknown` until a data plane has checked it.
 */
export class NodeHealthService {
  constructor(private readonly repo: NodeBalancerRepository) {}

  /**
   * Records one report from a data plane serving `fromRegion` (`*` = every region). Nodes deleted
   * since the data plane saw them are skipped, and so are nodes of NodeBalancers outside its
   * region: a data plane speaks only for traffic it can serve (docs/security/grpc.md). Returns
   * whether the report was recorded.
   */
  async report(configId: number, nodeId: number, status: string, fromRegion = '*'): Promise<boolean> {
    if (status !== 'UP' && status !== 'DOWN') return false;
    const node = await this.repo.node(configId, nodeId);
    if (!node) return false;
    const nb = await this.repo.get(node.nodebalancerId);
    if (!nb || !regionServed(fromRegion, nb.region)) return false;
    await this.repo.setNodeStatus(node.id, status satisfies NodeStatus);
    return true;
  }
}

