import { ErrorCollector, FulcrumError } from '../../../lib/errors.js';
import type { AddressPools } from '../address-pools.js';
import type { Clock } from '../../../lib/clock.js';
import type { AddressRepository } from '../../store/ports.js';
import type { NodeBalancerRepository } from '../../store/nodebalancer-repository.js';
import type { Actor, AuthService } from '../auth/auth-service.js';
import type { EventService, EntityRef } from '../events/event-service.js';
import type { RegionCatalogue } from '../regions.js';
import type { Body } from '../validation/fields.js';
import type { NbConfig, NbNode, NodeBalancer } from './model.js';
import { validateConfig, validateNode, validateNodeBalancerCreate, validateNodeBalancerUpdate, validateRebuildNodes } from './validation.js';
import type { BackendCheck } from './backend-networks.js';
import { nodeBalancerReasons } from './reasons.js';
import { typeLimits } from './types.js';

export interface NodeBalancerServiceDeps {
  repo: NodeBalancerRepository;
  addresses: AddressRepository;
  auth: AuthService;
  events: EventService;
  regions: RegionCatalogue;
  clock: Clock;
  /** The IPv4 pools NodeBalancer addresses come from, per region. */
  pool: AddressPools;
  /** Where node addresses may point (backend-networks.ts). */
  backends: BackendCheck;
  /** Called after every committed change to a NodeBalancer; the push server coalesces these into snapshots. */
  onChange: (nodebalancerId: number) => void;
}

/**
 * NodeBalancers, their Configs and Nodes. Every write validates the whole request first, then
 * changes the store in one transaction, then records the event and notifies the push server.
 */
export class NodeBalancerService {
  constructor(private readonly d: NodeBalancerServiceDeps) {}

  private now(): number {
    return Math.floor(this.d.clock.now() / 1000) * 1000;
  }

  private ref(nb: NodeBalancer): EntityRef {
    return { id: nb.id, type: 'nodebalancer', label: nb.label, url: `/v4/nodebalancers/${nb.id}` };
  }

  private changed(actor: Actor, action: string, nb: NodeBalancer): void {
    this.d.events.record(action, this.ref(nb), { username: actor.user.username });
    this.d.onChange(nb.id);
  }

  list(actor: Actor): NodeBalancer[] {
    return this.d.repo.list().filter((nb) => this.d.auth.canRead(actor, 'nodebalancer', nb.id));
  }

  get(actor: Actor, id: number, access: 'read_only' | 'read_write' = 'read_only'): NodeBalancer {
    const nb = this.d.repo.get(id);
    if (!nb) throw FulcrumError.notFound();
    this.d.auth.requireAccess(actor, 'nodebalancer', id, access);
    return nb;
  }

  create(actor: Actor, body: Body): NodeBalancer {
    this.d.auth.requireAddGrant(actor, 'nodebalancer');
    const { label, region, clientConnThrottle, clientUdpSessThrottle, type, tags, configs } = validateNodeBalancerCreate(body, {
      regionExists: (id) => this.d.regions.has(id, 'NodeBalancers'),
      labelTaken: (l) => this.d.repo.byLabel(l) !== undefined,
      backends: this.d.backends,
    });

    const nb = this.d.repo.transaction(() => {
      const now = this.now();
      // Without a label the row is inserted under a placeholder and renamed balancer<ID> below,
      // inside the same transaction. The placeholder has a character no valid label can have,
      // so it never collides with a label a client chose.
      const created = this.d.repo.create({ label: label ?? '#pending', region, ipv4: '0.0.0.0', clientConnThrottle, clientUdpSessThrottle, type, tags, created: now, updated: now });
      const ipv4 = this.d.addresses.allocate(this.d.pool.forRegion(region), 'nodebalancer', created.id);
      if (!ipv4) throw FulcrumError.conflict('No NodeBalancer addresses are left in the pool');
      // The label defaults to balancer<ID>, known only once the row exists.
      const finalLabel = label ?? `balancer${created.id}`;
      if (!label && this.d.repo.byLabel(finalLabel)) throw FulcrumError.conflict('Could not generate a unique label; send one');
      this.d.repo.update(created.id, { label: finalLabel });
      this.d.repo.setIpv4(created.id, ipv4);
      for (const c of configs) {
        const cfg = this.d.repo.createConfig(created.id, c.config);
        for (const n of c.nodes) this.d.repo.createNode(created.id, cfg.id, n);
      }
      return this.d.repo.get(created.id)!;
    });
    this.d.auth.grantCreator(actor, 'nodebalancer', nb.id);
    this.changed(actor, 'nodebalancer_create', nb);
    return nb;
  }

  update(actor: Actor, id: number, body: Body): NodeBalancer {
    const nb = this.get(actor, id, 'read_write');
    const input = validateNodeBalancerUpdate(body, { current: nb.label, labelTaken: (l) => this.d.repo.byLabel(l) !== undefined });
    const patch: Partial<NodeBalancer> = {};
    if (input.label !== undefined) patch.label = input.label;
    if (input.clientConnThrottle !== undefined) patch.clientConnThrottle = input.clientConnThrottle;
    if (input.clientUdpSessThrottle !== undefined) patch.clientUdpSessThrottle = input.clientUdpSessThrottle;
    if (input.tags !== undefined) patch.tags = input.tags;
    this.d.repo.update(id, { ...patch, updated: this.now() });
    const next = this.d.repo.get(id)!;
    this.changed(actor, 'nodebalancer_update', next);
    return next;
  }

  delete(actor: Actor, id: number): void {
    const nb = this.get(actor, id, 'read_write');
    this.d.repo.transaction(() => {
      this.d.repo.delete(id);
      this.d.addresses.release('nodebalancer', id);
    });
    this.changed(actor, 'nodebalancer_delete', nb);
  }

  configs(actor: Actor, nbId: number): NbConfig[] {
    this.get(actor, nbId);
    return this.d.repo.configs(nbId);
  }

  config(actor: Actor, nbId: number, configId: number, access: 'read_only' | 'read_write' = 'read_only'): NbConfig {
    this.get(actor, nbId, access);
    const c = this.d.repo.config(nbId, configId);
    if (!c) throw FulcrumError.notFound();
    return c;
  }

  /** Config create ignores `nodes`, as the real API does (Cloud Manager adds them one by one after). */
  createConfig(actor: Actor, nbId: number, body: Body): NbConfig {
    const nb = this.get(actor, nbId, 'read_write');
    const errs = new ErrorCollector();
    const used = this.d.repo.configs(nbId).map((c) => c.port);
    const cfg = validateConfig(errs, body, '', used);
    errs.throwIfAny();
    const created = this.d.repo.createConfig(nbId, cfg!);
    this.changed(actor, 'nodebalancer_config_create', nb);
    return created;
  }

  updateConfig(actor: Actor, nbId: number, configId: number, body: Body): NbConfig {
    const cur = this.config(actor, nbId, configId, 'read_write');
    const errs = new ErrorCollector();
    const used = this.d.repo.configs(nbId).filter((c) => c.id !== configId).map((c) => c.port);
    const cfg = validateConfig(errs, body, '', used, cur);
    errs.throwIfAny();
    this.d.repo.updateConfig(configId, cfg!);
    this.changed(actor, 'nodebalancer_config_update', this.d.repo.get(nbId)!);
    return this.d.repo.config(nbId, configId)!;
  }

  deleteConfig(actor: Actor, nbId: number, configId: number): void {
    this.config(actor, nbId, configId, 'read_write');
    this.d.repo.deleteConfig(configId);
    this.changed(actor, 'nodebalancer_config_delete', this.d.repo.get(nbId)!);
  }

  /**
   * Replaces the config and its node set in one transaction: listed nodes with an id are updated,
   * without one are created, and stored nodes left out are deleted. Nothing changes on any error.
   */
  rebuild(actor: Actor, nbId: number, configId: number, body: Body): NbConfig {
    const cur = this.config(actor, nbId, configId, 'read_write');
    const errs = new ErrorCollector();
    const used = this.d.repo.configs(nbId).filter((c) => c.id !== configId).map((c) => c.port);
    const cfg = validateConfig(errs, body, '', used, cur);
    const existing = new Map(this.d.repo.nodes(configId).map((n) => [n.id, n]));
    const { updates, creates } = validateRebuildNodes(errs, body.nodes, existing, this.d.backends, cfg?.protocol ?? cur.protocol);
    const limit = typeLimits(this.d.repo.get(nbId)!.type);
    if (updates.length + creates.length > limit.nodesPerConfig) errs.add('nodes', nodeBalancerReasons.typeMax(limit.id, limit.nodesPerConfig));
    errs.throwIfAny();
    this.d.repo.transaction(() => {
      this.d.repo.updateConfig(configId, cfg!);
      const keep = new Set(updates.map((u) => u.id));
      for (const id of existing.keys()) if (!keep.has(id)) this.d.repo.deleteNode(id);
      for (const u of updates) this.d.repo.updateNode(u.id, u.node);
      for (const c of creates) this.d.repo.createNode(nbId, configId, c);
    });
    this.changed(actor, 'nodebalancer_config_update', this.d.repo.get(nbId)!);
    return this.d.repo.config(nbId, configId)!;
  }

  nodes(actor: Actor, nbId: number, configId: number): NbNode[] {
    this.config(actor, nbId, configId);
    return this.d.repo.nodes(configId);
  }

  node(actor: Actor, nbId: number, configId: number, nodeId: number, access: 'read_only' | 'read_write' = 'read_only'): NbNode {
    this.config(actor, nbId, configId, access);
    const n = this.d.repo.node(configId, nodeId);
    if (!n) throw FulcrumError.notFound();
    return n;
  }

  createNode(actor: Actor, nbId: number, configId: number, body: Body): NbNode {
    const cfg = this.config(actor, nbId, configId, 'read_write');
    const errs = new ErrorCollector();
    const node = validateNode(errs, body, '', undefined, this.d.backends, cfg.protocol);
    const limit = typeLimits(this.d.repo.get(nbId)!.type);
    if (this.d.repo.nodes(configId).length >= limit.nodesPerConfig) errs.add(undefined, nodeBalancerReasons.typeMax(limit.id, limit.nodesPerConfig));
    errs.throwIfAny();
    const created = this.d.repo.createNode(nbId, configId, node!);
    this.changed(actor, 'nodebalancer_node_create', this.d.repo.get(nbId)!);
    return created;
  }

  updateNode(actor: Actor, nbId: number, configId: number, nodeId: number, body: Body): NbNode {
    const cur = this.node(actor, nbId, configId, nodeId, 'read_write');
    const errs = new ErrorCollector();
    const node = validateNode(errs, body, '', cur, this.d.backends, this.d.repo.config(nbId, configId)!.protocol);
    errs.throwIfAny();
    this.d.repo.updateNode(nodeId, node!);
    this.changed(actor, 'nodebalancer_node_update', this.d.repo.get(nbId)!);
    return this.d.repo.node(configId, nodeId)!;
  }

  deleteNode(actor: Actor, nbId: number, configId: number, nodeId: number): void {
    this.node(actor, nbId, configId, nodeId, 'read_write');
    this.d.repo.deleteNode(nodeId);
    this.changed(actor, 'nodebalancer_node_delete', this.d.repo.get(nbId)!);
  }
}
