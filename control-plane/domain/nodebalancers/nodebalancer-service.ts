import { ErrorCollector, FulcrumError } from '../../../lib/errors.js';
import type { AddressPools } from '../address-pools.js';
import type { Clock } from '../../../lib/clock.js';
import type { AddressRepository } from '../ports.js';
import type { NodeBalancerRepository } from './repository.js';
import type { Actor, AuthService } from '../auth/auth-service.js';
import type { EventService, EntityRef } from '../events/event-service.js';
import type { RegionCatalogue } from '../regions.js';
import type { Body } from '../validation/fields.js';
import type { NbConfig, NbNode, NodeBalancer } from './model.js';
import { checkUdpCheckPort, validateConfig, validateNode, validateNodeBalancerCreate, validateNodeBalancerUpdate, validateRebuildNodes } from './validation.js';
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
  /** The IPv6 range NodeBalancers' `ipv6` comes from (every region); none: `ipv6` is null. */
  ipv6Pool?: string;
  /** Where node addresses may point (backend-networks.ts). */
  backends: BackendCheck;
  /** Called after every committed change to a NodeBalancer; the push server coalesces these into snapshots. */
  onChange: (nodebalancerId: number) => void;
}

/**
 * NodeBalancers, their Configs and Nodes. Every write reads, validates the whole request and
 * changes the store in one transaction (so checks such as a free label or port still hold when
 * it commits), then records the event and notifies the push server.
 */
export class NodeBalancerService {
  constructor(private readonly d: NodeBalancerServiceDeps) {}

  private now(): number {
    return Math.floor(this.d.clock.now() / 1000) * 1000;
  }

  private ref(nb: NodeBalancer): EntityRef {
    return { id: nb.id, type: 'nodebalancer', label: nb.label, url: `/v4/nodebalancers/${nb.id}` };
  }

  private async changed(actor: Actor, action: string, nb: NodeBalancer): Promise<void> {
    await this.d.events.record(action, this.ref(nb), { username: actor.user.username });
    this.d.onChange(nb.id);
  }

  /** Labels in use, for the validators' synchronous uniqueness check. */
  private async labels(): Promise<Set<string>> {
    return new Set((await this.d.repo.list()).map((nb) => nb.label));
  }

  async list(actor: Actor): Promise<NodeBalancer[]> {
    return (await this.d.repo.list()).filter((nb) => this.d.auth.canRead(actor, 'nodebalancer', nb.id));
  }

  async get(actor: Actor, id: number, access: 'read_only' | 'read_write' = 'read_only'): Promise<NodeBalancer> {
    const nb = await this.d.repo.get(id);
    if (!nb) throw FulcrumError.notFound();
    this.d.auth.requireAccess(actor, 'nodebalancer', id, access);
    return nb;
  }

  async create(actor: Actor, body: Body): Promise<NodeBalancer> {
    this.d.auth.requireAddGrant(actor, 'nodebalancer');
    const nb = await this.d.repo.transaction(async () => {
      const labels = await this.labels();
      const { label, region, clientConnThrottle, clientUdpSessThrottle, type, tags, configs } = validateNodeBalancerCreate(body, {
        regionExists: (id) => this.d.regions.has(id, 'NodeBalancers'),
        labelTaken: (l) => labels.has(l),
        backends: this.d.backends,
      });
      const now = this.now();
      // Without a label the row is inserted under a placeholder and renamed balancer<ID> below,
      // inside the same transaction. The placeholder has a character no valid label can have,
      // so it never collides with a label a client chose.
      const created = await this.d.repo.create({ label: label ?? '#pending', region, ipv4: '0.0.0.0', ipv6: null, clientConnThrottle, clientUdpSessThrottle, type, tags, created: now, updated: now });
      const ipv4 = await this.d.addresses.allocate(this.d.pool.forRegion(region), 'nodebalancer', created.id);
      if (!ipv4) throw FulcrumError.conflict('No NodeBalancer addresses are left in the pool');
      // The label defaults to balancer<ID>, known only once the row exists.
      const finalLabel = label ?? `balancer${created.id}`;
      if (!label && (await this.d.repo.byLabel(finalLabel))) throw FulcrumError.conflict('Could not generate a unique label; send one');
      await this.d.repo.update(created.id, { label: finalLabel });
      await this.d.repo.setIpv4(created.id, ipv4);
      if (this.d.ipv6Pool) {
        const ipv6 = await this.d.addresses.allocateIpv6(this.d.ipv6Pool, 'nodebalancer', created.id);
        if (!ipv6) throw FulcrumError.conflict('No NodeBalancer IPv6 addresses are left in the pool');
        await this.d.repo.setIpv6(created.id, ipv6);
      }
      for (const c of configs) {
        const cfg = await this.d.repo.createConfig(created.id, c.config);
        for (const n of c.nodes) await this.d.repo.createNode(created.id, cfg.id, n);
      }
      return (await this.d.repo.get(created.id))!;
    });
    await this.d.auth.grantCreator(actor, 'nodebalancer', nb.id);
    await this.changed(actor, 'nodebalancer_create', nb);
    return nb;
  }

  async update(actor: Actor, id: number, body: Body): Promise<NodeBalancer> {
    const next = await this.d.repo.transaction(async () => {
      const nb = await this.get(actor, id, 'read_write');
      const labels = await this.labels();
      const input = validateNodeBalancerUpdate(body, { current: nb.label, labelTaken: (l) => labels.has(l) });
      const patch: Partial<NodeBalancer> = {};
      if (input.label !== undefined) patch.label = input.label;
      if (input.clientConnThrottle !== undefined) patch.clientConnThrottle = input.clientConnThrottle;
      if (input.clientUdpSessThrottle !== undefined) patch.clientUdpSessThrottle = input.clientUdpSessThrottle;
      if (input.tags !== undefined) patch.tags = input.tags;
      await this.d.repo.update(id, { ...patch, updated: this.now() });
      return (await this.d.repo.get(id))!;
    });
    await this.changed(actor, 'nodebalancer_update', next);
    return next;
  }

  async delete(actor: Actor, id: number): Promise<void> {
    const nb = await this.d.repo.transaction(async () => {
      const nb = await this.get(actor, id, 'read_write');
      await this.d.repo.delete(id);
      await this.d.addresses.release('nodebalancer', id);
      return nb;
    });
    await this.changed(actor, 'nodebalancer_delete', nb);
  }

  async configs(actor: Actor, nbId: number): Promise<NbConfig[]> {
    await this.get(actor, nbId);
    return this.d.repo.configs(nbId);
  }

  async config(actor: Actor, nbId: number, configId: number, access: 'read_only' | 'read_write' = 'read_only'): Promise<NbConfig> {
    await this.get(actor, nbId, access);
    const c = await this.d.repo.config(nbId, configId);
    if (!c) throw FulcrumError.notFound();
    return c;
  }

  /** Config create ignores `nodes`, as the real API does (Cloud Manager adds them one by one after). */
  async createConfig(actor: Actor, nbId: number, body: Body): Promise<NbConfig> {
    const { nb, created } = await this.d.repo.transaction(async () => {
      const nb = await this.get(actor, nbId, 'read_write');
      const errs = new ErrorCollector();
      const used = (await this.d.repo.configs(nbId)).map((c) => c.port);
      const cfg = validateConfig(errs, body, '', used);
      errs.throwIfAny();
      return { nb, created: await this.d.repo.createConfig(nbId, cfg!) };
    });
    await this.changed(actor, 'nodebalancer_config_create', nb);
    return created;
  }

  async updateConfig(actor: Actor, nbId: number, configId: number, body: Body): Promise<NbConfig> {
    const { nb, updated } = await this.d.repo.transaction(async () => {
      const cur = await this.config(actor, nbId, configId, 'read_write');
      const errs = new ErrorCollector();
      const used = (await this.d.repo.configs(nbId)).filter((c) => c.id !== configId).map((c) => c.port);
      const cfg = validateConfig(errs, body, '', used, cur);
      if (cfg) checkUdpCheckPort(errs, 'udp_check_port', cfg, await this.d.repo.nodes(configId), this.d.backends);
      errs.throwIfAny();
      await this.d.repo.updateConfig(configId, cfg!);
      return { nb: (await this.d.repo.get(nbId))!, updated: (await this.d.repo.config(nbId, configId))! };
    });
    await this.changed(actor, 'nodebalancer_config_update', nb);
    return updated;
  }

  async deleteConfig(actor: Actor, nbId: number, configId: number): Promise<void> {
    const nb = await this.d.repo.transaction(async () => {
      await this.config(actor, nbId, configId, 'read_write');
      await this.d.repo.deleteConfig(configId);
      return (await this.d.repo.get(nbId))!;
    });
    await this.changed(actor, 'nodebalancer_config_delete', nb);
  }

  /**
   * Replaces the config and its node set in one transaction: listed nodes with an id are updated,
   * without one are created, and stored nodes left out are deleted. Nothing changes on any error.
   */
  async rebuild(actor: Actor, nbId: number, configId: number, body: Body): Promise<NbConfig> {
    const { nb, rebuilt } = await this.d.repo.transaction(async () => {
      const cur = await this.config(actor, nbId, configId, 'read_write');
      const errs = new ErrorCollector();
      const used = (await this.d.repo.configs(nbId)).filter((c) => c.id !== configId).map((c) => c.port);
      const cfg = validateConfig(errs, body, '', used, cur);
      const existing = new Map((await this.d.repo.nodes(configId)).map((n) => [n.id, n]));
      const { updates, creates } = validateRebuildNodes(errs, body.nodes, existing, this.d.backends, cfg?.protocol ?? cur.protocol);
      const limit = typeLimits((await this.d.repo.get(nbId))!.type);
      if (updates.length + creates.length > limit.nodesPerConfig) errs.add('nodes', nodeBalancerReasons.typeMax(limit.id, limit.nodesPerConfig));
      if (cfg) checkUdpCheckPort(errs, 'udp_check_port', cfg, [...updates.map((u) => u.node), ...creates], this.d.backends);
      errs.throwIfAny();
      await this.d.repo.updateConfig(configId, cfg!);
      const keep = new Set(updates.map((u) => u.id));
      for (const id of existing.keys()) if (!keep.has(id)) await this.d.repo.deleteNode(id);
      for (const u of updates) await this.d.repo.updateNode(u.id, u.node);
      for (const c of creates) await this.d.repo.createNode(nbId, configId, c);
      return { nb: (await this.d.repo.get(nbId))!, rebuilt: (await this.d.repo.config(nbId, configId))! };
    });
    await this.changed(actor, 'nodebalancer_config_update', nb);
    return rebuilt;
  }

  async nodes(actor: Actor, nbId: number, configId: number): Promise<NbNode[]> {
    await this.config(actor, nbId, configId);
    return this.d.repo.nodes(configId);
  }

  async node(actor: Actor, nbId: number, configId: number, nodeId: number, access: 'read_only' | 'read_write' = 'read_only'): Promise<NbNode> {
    await this.config(actor, nbId, configId, access);
    const n = await this.d.repo.node(configId, nodeId);
    if (!n) throw FulcrumError.notFound();
    return n;
  }

  async createNode(actor: Actor, nbId: number, configId: number, body: Body): Promise<NbNode> {
    const { nb, created } = await this.d.repo.transaction(async () => {
      const cfg = await this.config(actor, nbId, configId, 'read_write');
      const errs = new ErrorCollector();
      const node = validateNode(errs, body, '', undefined, this.d.backends, cfg.protocol);
      if (node) checkUdpCheckPort(errs, 'address', cfg, [node], this.d.backends);
      const limit = typeLimits((await this.d.repo.get(nbId))!.type);
      // Named `nodes`, as on rebuild and create: the config's node list is what is full (docs/compatibility.md).
      if ((await this.d.repo.nodes(configId)).length >= limit.nodesPerConfig) errs.add('nodes', nodeBalancerReasons.typeMax(limit.id, limit.nodesPerConfig));
      errs.throwIfAny();
      const created = await this.d.repo.createNode(nbId, configId, node!);
      return { nb: (await this.d.repo.get(nbId))!, created };
    });
    await this.changed(actor, 'nodebalancer_node_create', nb);
    return created;
  }

  async updateNode(actor: Actor, nbId: number, configId: number, nodeId: number, body: Body): Promise<NbNode> {
    const { nb, updated } = await this.d.repo.transaction(async () => {
      const cur = await this.node(actor, nbId, configId, nodeId, 'read_write');
      const errs = new ErrorCollector();
      const cfg = (await this.d.repo.config(nbId, configId))!;
      const node = validateNode(errs, body, '', cur, this.d.backends, cfg.protocol);
      if (node) checkUdpCheckPort(errs, 'address', cfg, [node], this.d.backends);
      errs.throwIfAny();
      await this.d.repo.updateNode(nodeId, node!);
      return { nb: (await this.d.repo.get(nbId))!, updated: (await this.d.repo.node(configId, nodeId))! };
    });
    await this.changed(actor, 'nodebalancer_node_update', nb);
    return updated;
  }

  async deleteNode(actor: Actor, nbId: number, configId: number, nodeId: number): Promise<void> {
    const nb = await this.d.repo.transaction(async () => {
      await this.node(actor, nbId, configId, nodeId, 'read_write');
      await this.d.repo.deleteNode(nodeId);
      return (await this.d.repo.get(nbId))!;
    });
    await this.changed(actor, 'nodebalancer_node_delete', nb);
  }
}
