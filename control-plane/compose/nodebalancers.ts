import { NodeBalancerService } from '../domain/nodebalancers/nodebalancer-service.js';
import { NodeHealthService } from '../domain/nodebalancers/node-health-service.js';
import { StatsService } from '../domain/nodebalancers/stats-service.js';
import { ConfigPushServer } from '../push/config-server.js';
import { configStore } from '../push/config-store.js';
import { TelemetryServer } from '../push/telemetry-server.js';
import { nodeBalancerRoutes } from '../api/routes/nodebalancers.js';
import { nodeBalancerToWire, type Transfer } from '../api/wire/nodebalancers.js';
import { REVOCATION_RECHECK_MS } from '../domain/fleet/fleet-service.js';
import { every, type ControlPlaneContext } from './context.js';

/**
 * Wires NodeBalancers in: the service behind the REST routes, the config push to data planes
 * (every committed change schedules a snapshot), and the telemetry that comes back from them
 * (node status, traffic counters). Returns the config push, which database endpoints join.
 */
export async function composeNodeBalancers(ctx: ControlPlaneContext): Promise<ConfigPushServer> {
  const repo = ctx.store.nodebalancers;
  const dataplanes = ctx.store.dataplanes;
  const stats = new StatsService(repo, ctx.clock);
  const push = new ConfigPushServer({ store: configStore(repo, dataplanes, ctx.kv), clock: ctx.clock, logger: ctx.logger, registry: ctx.registry, peers: ctx.peers, streams: ctx.hostStreams, replica: ctx.replicas.id });
  const telemetry = new TelemetryServer({ health: new NodeHealthService(repo), stats, clock: ctx.clock, logger: ctx.logger, peers: ctx.peers, streams: ctx.hostStreams });
  // A removed data plane's address is no longer trusted for PROXY headers by the members
  // (docs/security/mysql.md): forgotten when the removal is made or heard here, and, should the
  // notification be lost (or another replica write the address back), at the next re-check.
  ctx.fleet.onRevoke(async (role, id) => {
    if (role === 'dataplane') await push.forget(id);
  });
  const forgetRemoved = every(ctx, REVOCATION_RECHECK_MS, 'removed data planes could not be re-checked', async () => {
    for (const id of await ctx.fleet.removedAmong('dataplane', push.sources.ids())) await push.forget(id);
  });
  ctx.closers.push(() => forgetRemoved.cancel());
  await push.start();
  const service = new NodeBalancerService({
    repo, addresses: ctx.addresses, auth: ctx.auth, events: ctx.events, regions: ctx.regions, clock: ctx.clock,
    pool: ctx.nodebalancerPool,
    ipv6Pool: ctx.nodebalancerIpv6Pool,
    backends: ctx.backends,
    onChange: (id) => {
      push.nodeBalancerChanged(id);
      ctx.replicas.publish('nodebalancer', id);
    },
  });
  // Writes committed through another replica reach this replica's data planes too.
  ctx.replicas.onChange((c) => {
    if (c.kind === 'nodebalancer') push.nodeBalancerChanged(c.id);
    else if (c.kind === 'all') push.notifyChanged(true);
  });
  // Taken for dead by the other replicas while alive: its data planes are recorded again.
  ctx.replicas.onRevived(() => void push.reassert().catch((err) => ctx.logger.error({ err }, 'data planes could not be recorded again')));
  push.register(ctx.grpcServer);
  telemetry.register(ctx.grpcServer);
  ctx.closers.push(() => push.close());

  nodeBalancerRoutes(ctx.router, { service, repo, stats, hostnameSuffix: ctx.hostnameSuffix });
  ctx.users.registerEntities('nodebalancer', async () => (await repo.list()).map((nb) => ({ id: nb.id, label: nb.label })));
  ctx.account.registerCapability('NodeBalancers');
  ctx.account.registerTagged(async () => (await repo.list()).map((nb) => ({
    kind: 'nodebalancer' as const, id: nb.id, label: nb.label, tags: nb.tags,
    show: async () => nodeBalancerToWire(nb, (await stats.transfer(nb.id)) as Transfer, ctx.hostnameSuffix),
  })));
  // A data plane that refused the last configuration it was sent (a NACK) is the operator's to
  // see: a notice about the install, shown to unrestricted users.
  ctx.account.registerNotices(async () => (await dataplanes.list()).filter((s) => s.lastError !== null).map((s) => ({
    type: 'notice' as const, severity: 'major' as const, label: 'A data plane refused a NodeBalancer configuration',
    message: `Data plane ${s.id} (${s.region}) refused the NodeBalancer configuration it was sent and still serves version ${s.versionApplied}: ${s.lastError}`,
    entity: null, when: s.lastErrorAt, until: null,
  })));
  // Data-plane status (connected, applied version, last NACK), for operators and tests.
  ctx.router.get('/fulcrum/dataplanes', 'nodebalancers:read_only', async () => ({ data: await dataplanes.list() }));
  return push;
}
