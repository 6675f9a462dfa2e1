import type { AgentEvent } from '../../proto/gen/fulcrum/v1/AgentEvent.js';
import type { DesiredDatabase__Output } from '../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import type { NodeObservation } from '../../proto/gen/fulcrum/v1/NodeObservation.js';
import type { ObservedDatabase } from '../../proto/gen/fulcrum/v1/ObservedDatabase.js';
import type { NodeDetail } from './observe.js';
import { observedStatus, plan, promotionHeldBack, type DbObs } from './plan.js';
import { NODE_PORT, type DbState } from './state.js';

/** Everything a database's report is made of; the controller gathers it. */
export interface ReportInput {
  id: number;
  state?: DbState;
  /** The desired database, else the last one persisted. */
  desired?: DesiredDatabase__Output;
  clusterSize: number;
  /** The action (or operation) holding the lock. */
  busy?: string;
  details: NodeDetail[];
  lastObs?: DbObs;
  /** The desired generation `lastObs` was made against. */
  obsGeneration: number;
  /** The status of the previous report. */
  lastStatus: string;
  nodeName: (k: number) => string;
  primaryAddress: string;
  caPem: string;
  events: AgentEvent[];
  usedDiskMb: number;
}

/**
 * What the control plane is told about one database (docs/agent.md §1 and §5): its observed
 * status, members, endpoints, nodes, events and whether the desired generation has converged.
 * Pure: the same input gives the same report.
 */
export function reportDatabase(r: ReportInput): ObservedDatabase {
  const s = r.state;
  const d = r.desired;
  const local = r.lastObs?.spread?.local;
  const primaryNode = r.details.find((n) => n.index === s?.primary);
  // A spread cluster's primary on another host is its own agent's to report.
  const primaryElsewhere = !!local && !local.includes(s?.primary ?? 0);
  const primaryOk = primaryElsewhere || (!!primaryNode && primaryNode.state === 'running' && primaryNode.reachable && !primaryNode.readOnly);
  const replicas = r.details.filter((n) => n.index !== s?.primary);
  // Health is about the servers: a proxy_protocol_networks or account sync still to do (right after an
  // agent restart, say) is not a degraded database. A spread cluster's primary counts its replicas
  // on other hosts by their connections to it.
  const everyNode = local
    ? r.details.length === local.length && (primaryElsewhere || (primaryNode?.replicaHosts ?? 0) >= r.clusterSize - 1)
    : r.details.length === r.clusterSize;
  const healthy = primaryOk && everyNode && !s?.rebuild.length
    && replicas.every((n) => n.state === 'running' && n.reachable && n.replicating);
  // Converged: nothing left to do for the desired state (suspended: every node stopped).
  const wantSuspended = d?.state === 'suspended';
  const nothingToDo = !!r.lastObs && plan({ clusterSize: d?.clusterSize ?? 1, state: wantSuspended ? 'suspended' : 'running' }, r.lastObs).length === 0;
  const converged = nothingToDo && (wantSuspended ? !!s?.suspended : healthy);
  const canFailover = r.clusterSize > 1 && replicas.some((n) => n.state === 'running' && n.reachable);
  // Making a primary that came back read-only writable takes a moment; it is no state change.
  const status = r.busy === 'promote-primary' && r.lastStatus ? r.lastStatus : observedStatus({
    busy: r.busy,
    provisioned: !!s?.provisioned,
    error: s?.error,
    suspended: !!s?.suspended,
    desiredSuspended: wantSuspended,
    healthy,
    primaryOk,
    canFailover,
  });
  const members: Record<string, string> = {};
  if (s?.provisioned) {
    for (const n of r.details) if (n.state !== 'missing') members[n.address] = n.index === s.primary ? 'primary' : 'failover';
  }
  // Endpoints are the control plane's assignment; they are reported once the database exists.
  const listening = !!s?.provisioned;
  const nodes: NodeObservation[] = r.details.map((n) => ({
    name: r.nodeName(n.index),
    address: n.address,
    port: NODE_PORT,
    // A primary fenced for a planned switchover says so: the control plane fails over from one
    // whose switchover was abandoned (control-plane/domain/databases/failover-decision.ts).
    // One named primary for a position it lacks says so too: the control plane names another.
    role: n.state !== 'running' || !n.reachable ? 'down' : n.index === s?.primary ? primaryRole(s, r.lastObs, n) : 'replica',
    state: n.state,
    replicationOk: n.index === s?.primary ? true : n.replicating,
    gtidCurrentPos: n.gtid,
    lastError: n.lastError,
    member: n.index,
  }));
  return {
    id: r.id,
    status,
    members,
    hostPrimary: listening ? d?.hostPrimary ?? '' : '',
    hostSecondary: listening ? d?.hostSecondary ?? '' : '',
    port: listening ? d?.port ?? NODE_PORT : 0,
    caCertPem: r.caPem,
    error: s?.error ?? (status === 'degraded' ? r.details.find((n) => n.lastError)?.lastError ?? '' : ''),
    engineVersion: s?.running.version ?? '',
    currentPrimary: s?.provisioned ? r.primaryAddress : '',
    events: r.events,
    nodes,
    patchPending: !!r.lastObs?.patchPending,
    usedDiskMb: r.usedDiskMb,
    // Only an observation made against this very generation can say it has converged.
    convergedGeneration: converged && !r.busy && r.obsGeneration === d?.generation ? r.obsGeneration : 0,
  };
}

function primaryRole(s: DbState, obs: DbObs | undefined, n: NodeDetail): string {
  if (s.fencedTerm !== undefined) return 'fenced';
  return promotionHeldBack(obs?.spread, n) ? 'behind' : 'primary';
}
