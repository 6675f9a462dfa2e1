import { join } from 'node:path';
import { Gauge } from 'prom-client';
import { EngineCatalogue, detectLocalEngines, watchedEngines } from '../domain/databases/catalogue.js';
import { DatabaseService } from '../domain/databases/database-service.js';
import { DatabaseObserver } from '../domain/databases/observer.js';
import { FailoverCoordinator } from '../domain/databases/failover-coordinator.js';
import { BackupScheduler } from '../domain/databases/backup-schedule.js';
import { AgentReports } from '../domain/databases/agent-reports.js';
import { HostHealing, type HostView } from '../domain/databases/host-healing.js';
import { HostDrain, type DrainView } from '../domain/databases/host-drain.js';
import { Rollout } from '../domain/databases/rollout.js';
import { EndpointServing } from '../domain/databases/endpoint-serving.js';
import { ActivationGate } from '../domain/databases/activation-gate.js';
import { Switchover } from '../domain/databases/switchover.js';
import { SingleMove } from '../domain/databases/single-move.js';
import { HostOverview } from '../domain/databases/host-overview.js';
import { eventToWire } from '../domain/events/event-service.js';
import { AgentPushServer } from '../push/agent-server.js';
import { VersionLedger } from '../push/snapshot-cache.js';
import { databaseRoutes } from '../api/routes/databases.js';
import { every, type ControlPlaneContext } from './context.js';
import type { ConfigPushServer } from '../push/config-server.js';
import { buildDatabaseEndpoints } from '../push/endpoint-builder.js';

/** How often the engine catalogue is compared with what the databases run. */
const RETARGET_MS = 2000;
/** How often spread clusters' primaries are checked (well under FAILOVER_AFTER_MS). */
const FAILOVER_TICK_MS = 500;
/** How often the lease holder looks for lost hosts and members to re-place. */
const HEALING_TICK_MS = 1000;
/** How often the lease holder looks for due auto backups: a day's backup starts within this of 00:00 UTC. */
const BACKUP_SCHEDULE_MS = 30_000;

/**
 * Wires Managed Databases in: the engine catalogue, the service behind the REST routes, the
 * agent push (every committed change schedules a round; placement happens there) and the
 * observer that turns agent reports into the API status, and the database endpoints the data
 * planes serve (`dataplanes`, the config push).
 */
export async function composeDatabases(ctx: ControlPlaneContext, dataplanes: ConfigPushServer): Promise<void> {
  const repo = ctx.store.databases;
  // Engine catalogue: the operator's file wins; else the local servers plus the engine ids agents
  // report. Never an image or binary from an agent (docs/security/secrets.md, "Engines"). The
  // catalogue answers at once, so the reported ids are read after every agent report and tick.
  const configured = watchedEngines(join(ctx.stateDir, 'database-engines.json'));
  const detected = await detectLocalEngines();
  let reported: string[] = [];
  const readReported = async () => {
    reported = (await repo.agents()).flatMap((a) => a.engines.map((e) => e.id));
  };
  await readReported();
  const engines = new EngineCatalogue(configured, detected, () => reported);

  // The service and the observer are built before the push server they notify.
  const push: { server?: AgentPushServer } = {};
  const service = new DatabaseService({
    repo, addresses: ctx.addresses, auth: ctx.auth, events: ctx.events, regions: ctx.regions, engines, clock: ctx.clock,
    pool: ctx.databasePool, onChange: () => {
      push.server?.notifyChanged();
      dataplanes.notifyChanged();
      ctx.replicas.publish('database');
    },
  });
  // `active` waits for the data planes to route to the database (docs/databases.md, "When a
  // database is active"); the observer and the rollout, which write it, ask the gate first.
  const gate = new ActivationGate({ routes: dataplanes.routes, clock: ctx.clock, logger: ctx.logger, registry: ctx.registry });
  const observer = new DatabaseObserver({ repo, events: ctx.events, service, clock: ctx.clock, logger: ctx.logger, gate });
  const failover = new FailoverCoordinator({ repo, events: ctx.events, clock: ctx.clock, logger: ctx.logger, registry: ctx.registry });
  // Every agent reports every few seconds: the domain says what a report changed, and only a
  // changed status or members (what the endpoints are made of) starts a data-plane round.
  const reports = new AgentReports({
    repo, observer, failover, clock: ctx.clock, logger: ctx.logger,
    onDesiredChanged: () => push.server?.notifyChanged(),
    onServedChanged: () => dataplanes.notifyChanged(),
    // The agents and data planes on the other replicas follow what this replica's agents report.
    onStoredChanged: () => ctx.replicas.publish('database'),
    onReported: readReported,
  });
  const endpoints = async () => buildDatabaseEndpoints(await repo.list(), new Set((await repo.pendingOperations())
    .filter((op) => op.kind === 'restore').map((op) => op.databaseId)));
  const agents = new AgentPushServer({
    agents: reports, ledger: new VersionLedger(ctx.kv, 'agent_desired_version'), clock: ctx.clock, logger: ctx.logger, registry: ctx.registry, peers: ctx.peers,
    streams: ctx.hostStreams, replica: ctx.replicas.id, proxySources: (region) => dataplanes.sources.forRegion(region),
  });
  push.server = agents;
  // Database writes committed through another replica reach this replica's agents and data planes.
  // That includes the data planes connected to another replica, whose addresses the members here
  // must accept PROXY headers from: re-read before the agents' round.
  ctx.replicas.onChange((c) => {
    if (c.kind === 'nodebalancer' || c.kind === 'removed') return;
    void dataplanes.sources.load()
      .catch((err) => ctx.logger.error({ err }, 'data-plane addresses could not be re-read'))
      .finally(() => agents.notifyChanged());
    dataplanes.notifyChanged();
  });
  // The data planes serve the endpoints (docs/databases.md, "Database endpoints"); a data plane
  // with a new member-facing address changes what the members accept PROXY headers from, here
  // and on the other replicas. A data plane that cannot listen on an endpoint says so in its
  // NACK: the database's events show it.
  const serving = new EndpointServing({ repo, events: ctx.events, logger: ctx.logger });
  dataplanes.serveDatabaseEndpoints(endpoints, () => {
    agents.notifyChanged();
    ctx.replicas.publish('database');
  }, async (dataplane, error) => {
    await serving.answered(dataplane, error);
    // An ACK may complete a database's routes, a NACK takes that data plane out of the wait.
    await reports.dataplaneAnswered();
  });
  ctx.replicas.onRevived(() => void agents.reassert().catch((err) => ctx.logger.error({ err }, 'agents could not be recorded again')));
  agents.register(ctx.grpcServer);
  ctx.closers.push(() => agents.close());

  // Catalogue changes (a new image or binary for an engine id) become pending patches.
  // Retargeting, like the failover tick below, runs on the replica holding the lease only
  // (docs/architecture.md, "The store").
  const retarget = every(ctx, RETARGET_MS, 'engine retargeting failed', async () => {
    // Every replica keeps its catalogue current (agents report to any of them); one retargets.
    await readReported();
    if (!ctx.replicas.leaseHeld()) return;
    if (await service.retargetEngines()) {
      agents.notifyChanged();
      ctx.replicas.publish('database');
    }
  });
  ctx.closers.push(() => retarget.cancel());

  // Clusters spread over agents: the control plane decides their failover (docs/databases.md,
  // "Clusters across hosts"); a promotion is pushed to every agent of the cluster at once.
  const failoverTick = every(ctx, FAILOVER_TICK_MS, 'database failover check failed', async () => {
    if (!ctx.replicas.leaseHeld()) return;
    // The new primary reaches the agents (roles) and the data planes (endpoint routes) at once,
    // on every replica.
    if (await failover.tick()) {
      agents.notifyChanged();
      dataplanes.notifyChanged();
      ctx.replicas.publish('database');
    }
  });
  ctx.closers.push(() => failoverTick.cancel());

  // Lost hosts: fenced, and their members re-placed on other hosts (docs/multi-host.md, "A lost host").
  const healing = new HostHealing({
    repo, events: ctx.events, clock: ctx.clock, logger: ctx.logger, registry: ctx.registry, lostAfterMs: ctx.hostLostAfterMs,
    revoke: (id) => ctx.fleet.revoke('agent', id),
    removed: async (id) => (await ctx.fleet.removedAmong('agent', [id])).length > 0,
  });
  const placementsChanged = () => {
    agents.notifyChanged();
    dataplanes.notifyChanged();
    ctx.replicas.publish('database');
  };
  // Draining hosts: replicas moved off first, then each primary by a planned switchover
  // (docs/multi-host.md, "Draining a host"); the new primary reaches agents and data planes at once.
  const switchover = new Switchover({
    repo, events: ctx.events, clock: ctx.clock, logger: ctx.logger, registry: ctx.registry,
    onChange: () => {
      agents.notifyChanged();
      dataplanes.notifyChanged();
      ctx.replicas.publish('database');
    },
  });
  // A 1-node database on a draining host moves through the object store (single-move.ts).
  const move = new SingleMove({ repo, events: ctx.events, clock: ctx.clock, logger: ctx.logger, registry: ctx.registry, onChange: placementsChanged });
  const drain = new HostDrain({ repo, events: ctx.events, clock: ctx.clock, logger: ctx.logger, registry: ctx.registry, healing, switchover, move });
  // Rolling changes of spread clusters: member by member, with the drain's switchover
  // (docs/multi-host.md, "Rolling changes across hosts"); each step runs in the background.
  const rollout = new Rollout({ repo, events: ctx.events, clock: ctx.clock, logger: ctx.logger, registry: ctx.registry, switchover, gate, onChange: placementsChanged });
  const healingTick = every(ctx, HEALING_TICK_MS, 'host healing round failed', async () => {
    if (!ctx.replicas.leaseHeld()) return;
    if (await healing.tick()) placementsChanged();
    if (await drain.tick()) placementsChanged();
    // Not awaited: a member's restart takes long, and the round goes on every second.
    void Promise.all(await rollout.tick());
  });
  ctx.closers.push(() => healingTick.cancel());

  // Auto backups: the lease holder claims each due day in the store and the agents' desired
  // state carries it (docs/databases.md, "Auto backups"); every replica's agents follow.
  const backupScheduler = new BackupScheduler({ repo, clock: ctx.clock, logger: ctx.logger.child({ component: 'backup-schedule' }) });
  const backupTick = every(ctx, ctx.backupScheduleMs ?? BACKUP_SCHEDULE_MS, 'auto backup schedule failed', async () => {
    if (!ctx.replicas.leaseHeld()) return;
    if (await backupScheduler.tick()) {
      agents.notifyChanged();
      ctx.replicas.publish('database');
    }
  });
  ctx.closers.push(() => backupTick.cancel());

  // Databases by status, read from the store at scrape time (bounded label set).
  new Gauge({
    name: 'fulcrum_databases',
    help: 'Managed databases by API status',
    labelNames: ['status'],
    registers: [ctx.registry],
    async collect() {
      const list = await repo.list();
      this.reset();
      for (const d of list) if (!d.deleting) this.inc({ status: d.status });
    },
  });

  // Grants can name databases (and are checked against the ones that exist), like NodeBalancers.
  ctx.users.registerEntities('database', async () => (await repo.list()).filter((d) => !d.deleting).map((d) => ({ id: d.id, label: d.label })));
  ctx.account.registerCapability('Managed Databases');
  ctx.account.registerNotices(() => service.maintenanceNotices());
  databaseRoutes(ctx.router, { service, engines });
  // Agent status (connected, region, runtime, engines, applied version, host state, members and
  // newest events), for operators, the console's Fleet page and tests.
  const overview = new HostOverview({ repo, events: ctx.events });
  ctx.router.get('/fulcrum/agents', 'databases:read_only', async () => ({
    data: (await overview.agents()).map((a) => ({ ...a, recentEvents: a.recentEvents.map(eventToWire) })),
  }));
  // An operator declares an agent host lost: fenced at once, its members re-placed (unrestricted users only).
  ctx.router.post('/fulcrum/agents/:id/lost', 'databases:read_write', async (c) => {
    ctx.auth.requireUnrestricted(c.actor);
    const view = await healing.declareLost(c.params.id ?? '', 'operator', 'declared lost by an operator');
    placementsChanged();
    return hostWire(view);
  });
  // An operator drains an agent host before maintenance, or ends the drain (unrestricted users only).
  ctx.router.post('/fulcrum/agents/:id/drain', 'databases:read_write', async (c) => {
    ctx.auth.requireUnrestricted(c.actor);
    const view = await drain.drain(c.params.id ?? '');
    placementsChanged();
    return drainWire(view);
  });
  ctx.router.post('/fulcrum/agents/:id/undrain', 'databases:read_write', async (c) => {
    ctx.auth.requireUnrestricted(c.actor);
    const view = await drain.undrain(c.params.id ?? '');
    placementsChanged();
    return drainWire(view);
  });
}

function drainWire(v: DrainView): Record<string, unknown> {
  return { id: v.id, draining: v.draining, draining_at: v.drainingAt, members_left: v.membersLeft };
}

function hostWire(v: HostView): Record<string, unknown> {
  return { id: v.id, region: v.region, state: v.state, last_seen: v.lastSeen, lost_at: v.lostAt };
}
