import { Counter } from 'prom-client';
import type { Logger } from '../../../lib/logger.js';
import { databaseRef } from './database-service.js';
import { recoveryAgent, unrecoverable } from './host-rules.js';
import { spansAgents } from './placement.js';
import { agentOperation, fencePosition, type SwitchoverDeps } from './switchover.js';
import type { AgentRecord, DatabaseRecord, MemberPlacement } from './model.js';

/**
 * How long the fence of a move may take: the node goes read-only, then one archive round closes
 * and ships its binlog to the store (a base backup first when the archive has no chain yet).
 * Past it the move is abandoned and the node serves writes again.
 */
export const MOVE_FENCE_DEADLINE_MS = 60_000;

/** How a move ended. */
export type MoveOutcome =
  | { kind: 'moved'; agentId: string; position: string; fencedMs: number }
  | { kind: 'abandoned'; reason: string };

/**
 * Why the 1-node database `db` on `from` cannot be moved, or null when it can, pure: its objects
 * must be in an object store the host shares with another (the new host rebuilds from them) and
 * the control plane must hold their key, and another agent must be there to take it.
 */
export function moveRefusal(
  db: Pick<DatabaseRecord, 'id' | 'label' | 'region' | 'clusterSize' | 'backupKey'>, from: AgentRecord, agents: readonly AgentRecord[], now: number,
): string | null {
  if (db.clusterSize !== 1) return `database ${db.id} (${db.label}) runs all its members on this host; moving a cluster that is not spread over hosts is not built`;
  if (!from.backupStore) return `database ${db.id} (${db.label}) is a 1-node database and this host has no backup store: it is moved by rebuilding it on another host from the store, so a drain needs one (--backup-store)`;
  const why = unrecoverable(db, from);
  if (why) return `database ${db.id} (${db.label}) cannot be rebuilt on another host: ${why}`;
  if (!moveTarget(db, from, agents, new Map(), now)) {
    return `database ${db.id} (${db.label}) has no other host to go to: no connected agent of region ${db.region} that is not draining shares this host's object store`;
  }
  return null;
}

/** The agent a 1-node database on the draining `from` moves to (recoveryAgent, less draining hosts), pure. */
export function moveTarget(
  db: Pick<DatabaseRecord, 'region'>, from: AgentRecord, agents: readonly AgentRecord[], load: ReadonlyMap<string, number>, now: number,
): string | undefined {
  return recoveryAgent(db, from.backupStore ?? '', agents.filter((a) => a.id !== from.id && !a.drainingAt), load, now);
}

/** What a move needs is what a switchover needs: the store, the events, the push. */
export type SingleMoveDeps = SwitchoverDeps;

/**
 * The planned move of a 1-node database to another host (docs/multi-host.md, "Draining a host"),
 * run by the lease holder for a drain. It reuses the lost-host recovery (host-healing.ts), made
 * lossless by a fence first:
 *
 * 1. *Fence* (FenceOp to its agent): the node goes read-only (writes are refused with MariaDB's
 *    read-only error; commits in flight finish, acknowledged) and its agent runs one more archive
 *    round, so the object store holds every committed transaction, before it answers.
 * 2. *Place*: in one store transaction, if nothing else changed the database meanwhile, it is
 *    placed on the target as a recovery: the target rebuilds it from the store (its newest base
 *    plus every archived binlog, which now ends at the fence) with the same id, key, credentials,
 *    CA and `hosts.primary`, and the data planes route to it once it reports. The old agent, no
 *    longer sent it, removes its node but keeps the objects (its agent knows it was fenced to move).
 *
 * A fence that fails or runs past MOVE_FENCE_DEADLINE_MS abandons the move: the term is raised
 * and that fence's term named lifted, which lifts the fence (the node is writable again where it was).
 */
export class SingleMove {
  private readonly log: Logger;
  private readonly running = new Set<number>();
  private readonly total?: Counter;

  constructor(private readonly d: SingleMoveDeps) {
    this.log = d.logger.child({ component: 'single-move' });
    if (d.registry) {
      this.total = new Counter({ name: 'fulcrum_database_moves_total', help: '1-node databases moved off a draining host through the object store, by result', labelNames: ['result'], registers: [d.registry] });
    }
  }

  /** A move of this database is under way in this process. */
  busy(databaseId: number): boolean {
    return this.running.has(databaseId);
  }

  /** Moves the 1-node database `databaseId` from agent `from` to agent `to`; `why` goes into the events. */
  async run(databaseId: number, from: string, to: string, why: string): Promise<MoveOutcome> {
    if (this.running.has(databaseId)) return { kind: 'abandoned', reason: 'a move of this database is already under way' };
    this.running.add(databaseId);
    try {
      const out = await this.steps(databaseId, from, to, why);
      this.total?.inc({ result: out.kind });
      return out;
    } finally {
      this.running.delete(databaseId);
    }
  }

  private async steps(databaseId: number, from: string, to: string, why: string): Promise<MoveOutcome> {
    const db = await this.d.repo.get(databaseId);
    if (!db || db.deleting) return { kind: 'abandoned', reason: 'the database is gone' };
    if (!stillOn(db, await this.d.repo.members(databaseId), from, db.term)) return { kind: 'abandoned', reason: `the database no longer runs as one node on agent ${from}` };
    const found = db.term;
    await this.d.events.record('database_update', databaseRef(db), {
      status: 'notification',
      message: `Move to agent ${to} (${why}): the database is made read-only on agent ${from} and its binlog shipped to the object store, then it is rebuilt on agent ${to} from the store up to that point; writes are refused until it serves there.`,
      hosts: [to, from],
    });
    this.log.info({ database: databaseId, from, to, term: found }, 'move of a 1-node database started');
    const fence = await agentOperation(this.d, databaseId, 'fence', { agent: from, term: found, member: 1 }, this.d.clock.now() + MOVE_FENCE_DEADLINE_MS, MOVE_FENCE_DEADLINE_MS);
    // A database never written to has no position yet (''): its store holds all of nothing.
    const position = fence.output ? fencePosition(fence.output) : '';
    if (fence.state !== 'done' || position === null) return this.abandon(db, found, from, `the fence on agent ${from} ${fence.error ?? 'did not answer in time'}`);
    const fencedMs = this.d.clock.now();
    const placed = await this.d.repo.transaction(async () => {
      const cur = await this.d.repo.get(databaseId);
      if (!cur || cur.deleting || !stillOn(cur, await this.d.repo.members(databaseId), from, found)) return false;
      await this.d.repo.setMembers(databaseId, [to]);
      await this.d.repo.update(databaseId, {
        agentId: to, primaryMember: 1, primaryPosition: '', status: 'degraded', members: {}, generation: cur.generation + 1,
        recovery: { from, lostMs: fencedMs, placedMs: fencedMs, planned: true }, updated: fencedMs,
      });
      return true;
    });
    if (!placed) return this.abandon(db, found, from, 'the database changed during the move (a resize, a scale or a delete)');
    this.d.onChange();
    const message = `Placed on agent ${to} (${why}): rebuilt there from the object store up to the fence's position ${position || '(empty)'}, every write acknowledged on agent ${from} included. The same id, credentials and hosts.`;
    await this.d.events.record('database_update', databaseRef(db), { status: 'notification', message, hosts: [to, from] });
    this.log.warn({ database: databaseId, from, to, position }, '1-node database placed on another host after its fence');
    return { kind: 'moved', agentId: to, position, fencedMs };
  }

  /**
   * Lifts the fence: a higher term that names this fence's term abandoned (fence_lifted_term), the
   * one word the agent lifts a move's fence on (a higher term alone keeps it), and only while the
   * database is still on `from` at the fence's term (nothing placed it elsewhere meanwhile).
   */
  private async abandon(db: DatabaseRecord, found: number, from: string, reason: string): Promise<MoveOutcome> {
    const lifted = await this.d.repo.transaction(async () => {
      const now = await this.d.repo.get(db.id);
      if (!now || now.deleting || now.term !== found || now.agentId !== from) return false;
      await this.d.repo.update(db.id, { term: found + 1, fenceLiftedTerm: found, updated: Math.floor(this.d.clock.now() / 1000) * 1000 });
      return true;
    });
    if (lifted) this.d.onChange();
    await this.d.events.record('database_update', databaseRef(db), { status: 'failed', message: `Move to another host abandoned: ${reason}. It serves on agent ${from} again.`, hosts: [from] });
    this.log.warn({ database: db.id, from, reason }, 'move of a 1-node database abandoned');
    return { kind: 'abandoned', reason };
  }
}

/** Whether `db` is still the running 1-node database on `from` at `term`, pure. */
export function stillOn(
  db: Pick<DatabaseRecord, 'clusterSize' | 'agentId' | 'term' | 'runState' | 'provisioned' | 'recovery'>, placements: readonly MemberPlacement[], from: string, term: number,
): boolean {
  if (db.clusterSize !== 1 || db.agentId !== from || db.term !== term || db.runState !== 'running' || !db.provisioned || db.recovery) return false;
  return !spansAgents(placements) && placements.every((m) => m.agentId === from);
}
