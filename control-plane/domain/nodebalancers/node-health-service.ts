import type { NodeBalancerRepository } from '../../store/nodebalancer-repository.js';
import type { NodeStatus } from './model.js';

/**
 * Node health reaching the API: data planes report each node's transitions as they happen, and
 * the last one is the node's `status` (and its Config's `nodes_status`). Only UP and DOWN are
 * reports; a node stays `unknown` until a data plane has checked it.
 */
export class NodeHealthService {
  constructor(private readonly repo: NodeBalancerRepository) {}

  /** Records one report; nodes deleted since the data plane saw them are skipped. */
  report(configId: number, nodeId: number, status: string): void {
    if (status !== 'UP' && status !== 'DOWN') return;
    const node = this.repo.node(configId, nodeId);
    if (node) this.repo.setNodeStatus(node.id, status satisfies NodeStatus);
  }
}
