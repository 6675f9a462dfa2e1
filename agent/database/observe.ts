import type { DesiredDatabase__Output } from '../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { withoutStatementText } from '../../lib/logger.js';
import { q, withAdmin } from '../mysql/admin.js';
import { replicaStatus } from '../mysql/replication.js';
import { sameSpec } from '../runtime/container-runtime.js';
import type { ClusterContext } from './context.js';
import { readProxyNetworks, sameNetworks } from './endpoints.js';
import { guardSession, lockedOut, restartForRepair } from './guard.js';
import type { DbObs, NodeObs, SpreadObs } from './plan.js';
import { accountsKey, type DbState } from './state.js';

/** What one observation found on a node, beyond what `plan` needs. */
export interface NodeDetail extends NodeObs {
  address: string;
  /** The member's proxy_protocol_networks ('' when not read). */
  proxyNetworks: string;
  gtid: string;
  lastError: string;
}

export type InspectContext = Pick<ClusterContext, 'runtime' | 'nodeIndexes' | 'nodeName' | 'nodeSpec' | 'adminTarget' | 'primaryAddress' | 'log'>;

/** What the controller knows that the nodes cannot tell. */
export interface ObserveInput {
  state?: DbState;
  /** The control plane's desired database (absent: it is to be deleted). */
  desired?: DesiredDatabase__Output;
  linrootPassword: string;
  patchRequested: boolean;
  windowOpen: () => boolean;
  /** The engine build the desired state asks for (a different one is a pending patch). */
  resolveEngine: () => DbState['running'];
  /** proxy_protocol_networks the members should run with (database/endpoints.ts). */
  proxyNetworks: string;
  /** A cluster spread over agents: what its plan needs beyond the local nodes. */
  spread?: SpreadObs;
}

/**
 * The observation half of the reconcile loop (docs/agent.md §5): what every node runs and how
 * it replicates, turned into the `DbObs` that `plan` decides on. It keeps the last node details
 * (the report and the endpoints are made from them) and counts consecutive observations with an
 * unusable primary, per primary (a new primary starts from zero).
 */
export class Observer {
  details: NodeDetail[] = [];
  /** Each node's last GTID position seen while it answered (kept after it stops answering). */
  private readonly lastGtid = new Map<number, string>();
  last?: DbObs;
  /** The desired generation the last full observation was checked against. */
  generation = 0;
  private primaryDown = 0;
  private countedPrimary = 0;

  async observe(db: InspectContext, input: ObserveInput): Promise<DbObs> {
    const { state: s, desired: d } = input;
    if (s?.primary !== this.countedPrimary) {
      this.countedPrimary = s?.primary ?? 0;
      this.primaryDown = 0;
    }
    const base: DbObs = {
      known: !!s,
      provisioned: !!s?.provisioned,
      clusterSize: s?.addresses.length ?? 0,
      primary: s?.primary ?? 1,
      nodes: [],
      rebuild: s?.rebuild ?? [],
      accountsCurrent: true,
      proxiesCurrent: true,
      suspended: !!s?.suspended,
      patchPending: false,
      patchRequested: input.patchRequested,
      windowOpen: false,
      primaryDownCount: this.primaryDown,
    };
    if (!s || !s.provisioned || !d) {
      this.last = base;
      return base;
    }
    this.details = await inspectNodes(db, s);
    for (const n of this.details) if (n.reachable && n.gtid) this.lastGtid.set(n.index, n.gtid);
    const primary = this.details.find((n) => n.index === s.primary);
    this.primaryDown = primary?.state === 'running' && primary.reachable ? 0 : this.primaryDown + 1;
    let patchPending = false;
    try {
      const t = input.resolveEngine();
      patchPending = t.binary !== s.running.binary || t.image !== s.running.image;
    } catch {
      // An engine gone from the catalogue cannot be patched to.
    }
    const obs: DbObs = {
      ...base,
      nodes: this.details,
      primaryDownCount: this.primaryDown,
      accountsCurrent: s.accountsKey === accountsKey(d.allowList, input.linrootPassword),
      proxiesCurrent: this.details.every((n) => n.state !== 'running' || !n.reachable || sameNetworks(n.proxyNetworks, input.proxyNetworks)),
      patchPending,
      windowOpen: input.windowOpen(),
      spread: input.spread,
    };
    this.last = obs;
    this.generation = d.generation;
    return obs;
  }

  /** Replicas seen replicating in the last observation, most useful first. */
  healthyReplicas(primary: number | undefined): number[] {
    return this.details.filter((n) => n.index !== primary && n.state === 'running' && n.reachable && n.replicating).map((n) => n.index);
  }

  /** The last GTID position node k had while it answered ('' when never seen). */
  lastKnownGtid(k: number): string {
    return this.lastGtid.get(k) ?? '';
  }

  /** Node indexes, other than the primary, whose server answered in the last observation. */
  liveReplicas(primary: number): number[] {
    return this.details.filter((n) => n.index !== primary && n.state === 'running' && n.reachable).map((n) => n.index);
  }
}

/** Runtime state, spec equality, and over the admin socket read_only, GTID and replication. */
async function inspectNodes(db: InspectContext, s: DbState): Promise<NodeDetail[]> {
  const details = await Promise.all(
    db.nodeIndexes().map(async (k): Promise<NodeDetail> => {
      const st = await db.runtime.inspect(db.nodeName(k));
      const n: NodeDetail = {
        index: k, state: st.state, specCurrent: false, reachable: false, readOnly: true, replicating: false,
        address: s.addresses[k - 1]!, gtid: '', lastError: '', proxyNetworks: '',
      };
      if (st.state === 'missing') return n;
      n.specCurrent = !!st.spec && sameSpec(st.spec, db.nodeSpec(k));
      if (st.state !== 'running') return n;
      let repair = '';
      try {
        await withAdmin(await db.adminTarget(k), async (c) => {
          if ((await guardSession(c, s.replPassword, db.log)) === 'restart') repair = 'root@localhost lost its grants';
          const rows = await q(c, 'SELECT @@read_only AS ro, @@gtid_current_pos AS g, @@rpl_semi_sync_master_enabled AS ss');
          n.readOnly = Number(rows[0]?.ro) === 1;
          n.gtid = String(rows[0]?.g ?? '');
          n.semiSyncMaster = Number(rows[0]?.ss) === 1;
          n.replicaHosts = (await q(c, 'SHOW SLAVE HOSTS')).length;
          n.proxyNetworks = await readProxyNetworks(c);
          const rs = await replicaStatus(c);
          n.replicating = !!rs && rs.ioRunning && rs.sqlRunning && rs.masterHost === db.primaryAddress();
          n.lastError = withoutStatementText(rs?.lastError ?? '');
        });
        n.reachable = true;
      } catch (err) {
        n.lastError = withoutStatementText((err as Error).message);
        if (lockedOut(err)) repair = n.lastError;
      }
      if (repair) await restartForRepair(db.runtime, db.nodeName(k), db.log, repair).catch((err) => db.log.error({ err }, 'repair restart failed'));
      return n;
    }),
  );
  return details.sort((a, b) => a.index - b.index);
}
