import { createHash } from 'node:crypto';
import type { NodeSpec } from '../config/model.js';
import type { Balanced } from '../balancing/picker.js';
import { bumpPolicyEpoch } from '../native/policy-epoch.js';

export type NodeStatus = 'unknown' | 'UP' | 'DOWN';

/** A pooled keep-alive backend connection as the node sees it (see listeners/backend-conn.ts). */
export interface Pooled {
  destroy(): void;
}

/**
 * Live state of one node of one config: health, in-flight count (for leastconn) and the pool of
 * idle keep-alive backend connections. It survives snapshots while the node keeps its id and
 * address, so health and pools are not reset by unrelated edits; connections that picked it keep
 * their reference even after it leaves the config (`retired`).
 */
export class NodeState implements Balanced {
  active = 0;
  fails = 0;
  passes = 0;
  readonly idle: Pooled[] = [];
  private nbSrvId: string | null = null;
  // Status, retirement and spec decide whether the node serves a pinned flow (servesPinned): a
  // change to any of them bumps the policy epoch, so the udp native path asks again
  // (native/policy-epoch.ts).
  private st: NodeStatus = 'unknown';
  private gone = false;
  private sp: NodeSpec;

  constructor(spec: NodeSpec, private readonly configId: number) {
    this.sp = spec;
  }

  get status(): NodeStatus {
    return this.st;
  }

  set status(v: NodeStatus) {
    if (v !== this.st) bumpPolicyEpoch();
    this.st = v;
  }

  get retired(): boolean {
    return this.gone;
  }

  set retired(v: boolean) {
    if (v !== this.gone) bumpPolicyEpoch();
    this.gone = v;
  }

  get spec(): NodeSpec {
    return this.sp;
  }

  set spec(v: NodeSpec) {
    if (v !== this.sp) bumpPolicyEpoch();
    this.sp = v;
  }

  /**
   * Opaque NB_SRVID value: names the node without revealing its address. Made when first asked
   * (only http_cookie stickiness asks): a data plane of 200,000 nodes would otherwise hash and
   * hold one per node in every process (docs/dataplane.md, "Large states").
   */
  get cookie(): string {
    return (this.nbSrvId ??= createHash('sha256').update(`fulcrum:${this.configId}:${this.spec.id}:${this.spec.address}`).digest().toString('hex', 0, 8));
  }

  get weight(): number {
    return this.spec.weight;
  }

  get id(): number {
    return this.spec.id;
  }

  /** May this node serve a client that is pinned to it (stickiness)? drain and backup may. */
  get servesPinned(): boolean {
    return !this.retired && this.spec.mode !== 'reject' && this.status !== 'DOWN';
  }

  closeIdle(): void {
    while (this.idle.length > 0) this.idle.pop()!.destroy();
  }
}
