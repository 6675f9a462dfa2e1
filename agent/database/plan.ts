/**
 * The agent's decisions as a pure function (docs/agent.md §5): `plan(desired, observed)` says
 * what to do next for one database. The controller observes, plans, executes the first action,
 * and observes again; nothing here does I/O, so every branch is unit tested
 * (test/unit/agent/reconcile.test.ts).
 */

import { gtidContains } from '../../lib/gtid.js';

export interface NodeObs {
  index: number;
  /** Runtime state. */
  state: 'running' | 'stopped' | 'missing';
  /** The node runs with the spec the desired state calls for (limits, config, certificates). */
  specCurrent: boolean;
  /** The agent's admin session works. */
  reachable: boolean;
  readOnly: boolean;
  /** Replicating from the current primary with both threads running. */
  replicating: boolean;
  /** The semi-sync master side is on (read on running nodes; absent when not read). */
  semiSyncMaster?: boolean;
  /** Replicas connected to this node's binlog (SHOW SLAVE HOSTS). */
  replicaHosts?: number;
  /** gtid_current_pos while it answers (absent when not read). */
  gtid?: string;
}

export interface DbObs {
  /** The agent has state for this database (nodes may or may not exist). */
  known: boolean;
  provisioned: boolean;
  /** Node count the database was built with (0 when unknown). */
  clusterSize: number;
  primary: number;
  nodes: NodeObs[];
  /** Nodes to rebuild from scratch before they rejoin (old primaries after failover). */
  rebuild: number[];
  accountsCurrent: boolean;
  proxiesCurrent: boolean;
  suspended: boolean;
  /** The desired binary/image differs from what runs. */
  patchPending: boolean;
  /** A patch was asked for now (PatchOp): it runs whatever the window says. */
  patchRequested: boolean;
  /** The maintenance window is open now (lib/maintenance-window.ts). */
  windowOpen: boolean;
  /** Consecutive observations in which the primary was unusable. */
  primaryDownCount: number;
  /** false: a running node lacks a dynamic engine_config variable (variables.ts); absent: nothing to check. */
  variablesCurrent?: boolean;
  /** Set for a cluster spread over agents (plan-spread.ts): `nodes` are the local members only. */
  spread?: SpreadObs;
  /**
   * A 1-node database fenced to move to another host (FenceOp, docs/multi-host.md, "Draining a
   * host"): its node stays read-only and writes nothing until it is removed here or the control
   * plane abandons the move (a higher term).
   */
  movingOut?: boolean;
}

/** What a spread cluster's plan needs beyond the local nodes. */
export interface SpreadObs {
  /** The members this agent runs. */
  local: number[];
  /** The primary's address is known (it is local, or its agent has reported it). */
  primaryKnown: boolean;
  /** semi_synch: the primary runs the semi-sync master side, without fallback. */
  semiSyncWanted: boolean;
  /**
   * The local primary is fenced for a planned switchover: it stays read-only (not promoted back,
   * nothing written as root) until the control plane names another member or abandons that fence.
   */
  fenced?: boolean;
  /**
   * The GTID position the control plane named the primary for in the current term ('' or absent:
   * none sent, an older control plane). A local primary is promoted only once it holds it.
   */
  promotionPosition?: string;
  /** Local members being seeded, acknowledging no semi-sync write until they have applied `until` (seed-ack.ts). */
  seeding?: { node: number; until: string }[];
  /**
   * Local members the control plane still marks seeding (DesiredMember.seeding): not failover
   * candidates there, so they acknowledge nothing yet however far they have applied.
   */
  marked?: number[];
}

export interface DesiredObs {
  clusterSize: number;
  state: 'running' | 'suspended';
}

export type Action =
  | { kind: 'provision' }
  | { kind: 'delete' }
  | { kind: 'suspend' }
  | { kind: 'resume' }
  | { kind: 'restart-primary' }
  | { kind: 'failover' }
  | { kind: 'promote-primary' }
  | { kind: 'rejoin'; index: number; rebuild: boolean }
  | { kind: 'acknowledge'; index: number }
  | { kind: 'hold-acks'; index: number }
  | { kind: 'rolling'; reason: 'resize' | 'patch' }
  | { kind: 'scale'; to: number }
  | { kind: 'sync-accounts' }
  | { kind: 'sync-proxies' }
  | { kind: 'sync-variables' };

/** Observations of a dead primary (process gone) needed before a failover. */
export const FAILOVER_AFTER = 2;
/**
 * Observations of a primary whose process runs but does not answer: a busy server is not a
 * dead one, so this waits longer before promoting a replica (and the old primary is killed
 * before the promotion is announced, so two writable primaries never coexist).
 */
export const FAILOVER_AFTER_UNREACHABLE = 5;

export function plan(desired: DesiredObs | undefined, o: DbObs): Action[] {
  if (!desired) return o.known ? [{ kind: 'delete' }] : [];
  if (desired.state === 'suspended') {
    return o.known && o.nodes.some((n) => n.state === 'running') ? [{ kind: 'suspend' }] : [];
  }
  if (o.suspended) return [{ kind: 'resume' }];
  if (!o.known || !o.provisioned) return [{ kind: 'provision' }];
  if (o.spread) return planSpread(o, o.spread);

  const actions: Action[] = [];
  const primary = o.nodes.find((n) => n.index === o.primary);
  const primaryOk = !!primary && primary.state === 'running' && primary.reachable;
  if (!primaryOk) {
    const candidates = o.nodes.filter((n) => n.index !== o.primary && n.state === 'running' && n.reachable);
    if (o.clusterSize > 1 && candidates.length > 0) {
      const needed = primary?.state === 'running' ? FAILOVER_AFTER_UNREACHABLE : FAILOVER_AFTER;
      if (o.primaryDownCount >= needed) actions.push({ kind: 'failover' });
      return actions;
    }
    return [{ kind: 'restart-primary' }];
  }
  // Moving out: nothing may write past the position the fence answered (the store holds up to
  // there, and the new host is rebuilt from it), account changes and restarts included.
  if (o.movingOut) return o.proxiesCurrent ? [] : [{ kind: 'sync-proxies' }];
  if (primary.readOnly) actions.push({ kind: 'promote-primary' });
  for (const n of o.nodes) {
    if (n.index === o.primary) continue;
    const rebuild = o.rebuild.includes(n.index) || n.state === 'missing';
    if (rebuild || n.state !== 'running' || !n.reachable || !n.replicating) {
      actions.push({ kind: 'rejoin', index: n.index, rebuild });
    }
  }
  for (let i = 1; i <= o.clusterSize; i++) {
    if (!o.nodes.some((n) => n.index === i) && !actions.some((a) => a.kind === 'rejoin' && a.index === i)) {
      actions.push(i === o.primary ? { kind: 'restart-primary' } : { kind: 'rejoin', index: i, rebuild: true });
    }
  }
  if (actions.length > 0) return actions;
  // A healthy cluster of another size than desired is scaled before anything restarts.
  if ((desired.clusterSize === 1 || desired.clusterSize === 3) && desired.clusterSize !== o.clusterSize) return [{ kind: 'scale', to: desired.clusterSize }];
  if (o.nodes.some((n) => !n.specCurrent)) actions.push({ kind: 'rolling', reason: 'resize' });
  else if (o.patchRequested || (o.patchPending && o.windowOpen)) actions.push({ kind: 'rolling', reason: 'patch' });
  if (o.variablesCurrent === false) actions.push({ kind: 'sync-variables' });
  if (!o.accountsCurrent) actions.push({ kind: 'sync-accounts' });
  if (!o.proxiesCurrent) actions.push({ kind: 'sync-proxies' });
  return actions;
}

/**
 * The plan of a cluster spread over agents (docs/databases.md, "Clusters across hosts"), pure.
 * This agent sees only its own members and never fails over on its own: the control plane names
 * the primary (the controller follows its term). So a local primary that is down is restarted
 * (the control plane promotes a replica elsewhere if that takes too long), a local primary that
 * is read-only or lacks its semi-sync master side is promoted, and every other local member is
 * made a replica of the named primary once that primary's address is known: a member still
 * writable (an old primary) or not replicating from it rejoins, after the errant check
 * (rejoin.ts); a member being seeded turns its semi-sync acknowledgements on once it has caught up.
 * A primary fenced for a planned switchover stays read-only. Rolling restarts are not run across
 * hosts (see docs).
 */
export function planSpread(o: DbObs, sp: SpreadObs): Action[] {
  const actions: Action[] = [];
  const primaryLocal = sp.local.includes(o.primary);
  if (primaryLocal) {
    const p = o.nodes.find((n) => n.index === o.primary);
    if (!p || p.state !== 'running' || !p.reachable) return [{ kind: 'restart-primary' }];
    // Named primary for a position its node does not hold (it was wiped or rebuilt behind it):
    // promoting it would lose acknowledged writes, and the local replicas must not be made to
    // follow it (a rebuild from it would wipe what they hold). Nothing is done until the control
    // plane names another member (the report says "behind").
    if (promotionHeldBack(sp, p)) return o.proxiesCurrent ? [] : [{ kind: 'sync-proxies' }];
    if (!sp.fenced && (p.readOnly || (sp.semiSyncWanted && p.semiSyncMaster === false))) actions.push({ kind: 'promote-primary' });
  }
  // Marked seeding, replicating with no entry of its own (it turned acknowledging under an agent
  // that did not read the mark): silenced.
  for (const k of unheld(sp, o.primary, o.nodes)) actions.push({ kind: 'hold-acks', index: k });
  for (const k of sp.local) {
    if (k === o.primary || !sp.primaryKnown) continue;
    const n = o.nodes.find((x) => x.index === k);
    const rebuild = o.rebuild.includes(k) || !n || n.state === 'missing';
    if (rebuild || n.state !== 'running' || !n.reachable || !n.replicating || !n.readOnly) actions.push({ kind: 'rejoin', index: k, rebuild });
  }
  for (const k of caughtUp(sp.seeding ?? [], o.primary, sp.local, o.nodes, sp.marked)) actions.push({ kind: 'acknowledge', index: k });
  if (actions.length > 0) return actions;
  if (o.variablesCurrent === false) actions.push({ kind: 'sync-variables' });
  // A fenced primary writes nothing, root's account changes included: they would be transactions
  // past its fenced position that the new primary lacks (errant on the old primary).
  if (primaryLocal && !sp.fenced && !o.accountsCurrent) actions.push({ kind: 'sync-accounts' });
  if (!o.proxiesCurrent) actions.push({ kind: 'sync-proxies' });
  return actions;
}

/**
 * The seeding members to turn acknowledging now (seed-ack.ts): each local one replicating from the
 * primary that has applied its `until` and that the control plane no longer marks seeding
 * (`marked`: it counts the member a failover candidate first, so no write is ever acknowledged
 * by a member it would not promote), and any entry for a member that is primary (named before
 * the agent saw it caught up) or no longer runs here (dropped; nothing to turn on).
 */
export function caughtUp(seeding: readonly { node: number; until: string }[], primary: number, local: readonly number[],
  nodes: readonly NodeObs[], marked: readonly number[] = []): number[] {
  return seeding.filter((e) => {
    if (e.node === primary || !local.includes(e.node)) return true;
    if (marked.includes(e.node)) return false;
    const n = nodes.find((x) => x.index === e.node);
    return !!n && n.state === 'running' && n.reachable && n.replicating && gtidContains(n.gtid ?? '', e.until);
  }).map((e) => e.node);
}

/**
 * The local replicas of a semi_synch cluster the control plane marks seeding that replicate with
 * no seeding entry here, so nothing keeps them from acknowledging: each gets one (seed-ack.ts,
 * holdAgain). A member not replicating is left to its rejoin, which seeds a new one silent.
 */
export function unheld(sp: SpreadObs, primary: number, nodes: readonly NodeObs[]): number[] {
  if (!sp.semiSyncWanted || !sp.primaryKnown) return [];
  return (sp.marked ?? []).filter((k) => {
    const n = nodes.find((x) => x.index === k);
    return k !== primary && sp.local.includes(k) && !sp.seeding?.some((e) => e.node === k)
      && !!n && n.state === 'running' && n.reachable && n.replicating;
  });
}

/**
 * The local members the desired state marks seeding (DesiredMember.seeding, the control plane's
 * mark). None from an older control plane, which never sends the mark: acknowledgements then turn
 * on once the member has caught up, as before that field.
 */
export function markedSeeding(d: { members?: readonly { index: number; local: boolean; seeding?: boolean }[] } | undefined): number[] {
  return (d?.members ?? []).filter((m) => m.local && m.seeding === true).map((m) => m.index);
}

/**
 * A spread cluster's local primary, still read-only, lacks the position the control plane named
 * it primary for: it is not promoted (its agent reports it "behind").
 */
export function promotionHeldBack(sp: SpreadObs | undefined, p: NodeObs | undefined): boolean {
  if (!sp?.promotionPosition || !p || p.state !== 'running' || !p.reachable || !p.readOnly) return false;
  return !gtidContains(p.gtid ?? '', sp.promotionPosition);
}

/**
 * The control plane names node `k` primary for a newer term than the one the agent follows (a
 * promotion that arrived after the action was planned): the node must not be turned into a
 * replica of the old primary, nor wiped: its data may be the only copy of acknowledged writes.
 */
export function namedPrimaryAhead(d: { term: number; primaryMember: number } | undefined, s: { term?: number }, k: number): boolean {
  return !!d && d.primaryMember === k && Number(d.term) > (s.term ?? 0);
}

/** The observed status reported for a database (the control plane owns the API status). */
export function observedStatus(input: {
  busy?: string;
  provisioned: boolean;
  error?: string;
  suspended: boolean;
  desiredSuspended: boolean;
  healthy: boolean;
  primaryOk: boolean;
  /** The primary is down but a replica can take over (3 nodes): degraded, not failed. */
  canFailover?: boolean;
}): string {
  const busyStatus: Record<string, string> = {
    provision: 'provisioning',
    delete: 'deleting',
    suspend: 'suspending',
    resume: 'resuming',
    rolling: 'updating',
    scale: 'resizing',
    'sync-accounts': 'updating',
    snapshot: 'backing_up',
    restore: 'restoring',
    failover: 'degraded',
    rejoin: 'degraded',
    'restart-primary': 'failed',
  };
  if (input.busy && busyStatus[input.busy]) {
    if (input.busy === 'sync-accounts' && !input.provisioned) return 'provisioning';
    return busyStatus[input.busy]!;
  }
  if (!input.provisioned) return input.error ? 'failed' : 'provisioning';
  if (input.suspended || input.desiredSuspended) return input.suspended ? 'suspended' : 'suspending';
  if (input.healthy) return 'active';
  return input.primaryOk || input.canFailover ? 'degraded' : 'failed';
}
