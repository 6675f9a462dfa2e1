import { Counter, type Registry } from 'prom-client';
import type { Clock } from '../../../lib/clock.js';
import type { Logger } from '../../../lib/logger.js';
import { LruMap } from '../../../lib/lru.js';
import type { DatabaseRecord } from './model.js';

/**
 * How long a database may wait for the data planes to apply its routes before it reads `active`
 * anyway (docs/databases.md, "When a database is active"): a wedged data plane must not hold a
 * database in provisioning for ever. Ten agent heartbeats; a healthy data plane applies a round
 * in milliseconds.
 */
export const ACTIVATION_WAIT_MS = 30_000;

/** What a database's endpoints are made of, as it will be once active. */
export type RoutedDatabase = Pick<DatabaseRecord, 'id' | 'region' | 'hostPrimary' | 'hostSecondary' | 'port' | 'allowList' | 'sslConnection' | 'members'>;

/**
 * Which data planes have not applied a database's routes yet (a port; push/route-acks.ts reads
 * the data planes' ACKed versions). Only connected data planes that serve the database's region
 * count. `refusing` are those whose last answer was a NACK: they keep their previous snapshot
 * until something changes, so they are named, not waited for.
 */
export interface AppliedRoutes {
  pending(db: RoutedDatabase): Promise<{ waiting: string[]; refusing: string[] }>;
}

/**
 * Decides when a database that its agent reports ready may read `active`: once every connected
 * data plane has applied a config version holding the routes it will have then, or after
 * ACTIVATION_WAIT_MS. The status writers (observer.ts, rollout.ts) ask it before they write
 * `active`; it writes nothing itself. The wait's start is kept in this replica's memory: a
 * database's reports reach one replica at a time, and a restart starts the wait again.
 */
export class ActivationGate {
  /** Database id -> when its writer first found the routes not applied (ms). */
  private readonly since = new LruMap<number, number>(10_000);
  private readonly log: Logger;
  private readonly unconfirmed: Counter | undefined;

  constructor(private readonly d: { routes?: AppliedRoutes; clock: Clock; logger: Logger; registry?: Registry }) {
    this.log = d.logger.child({ component: 'activation-gate' });
    this.unconfirmed = d.registry ? new Counter({
      name: 'fulcrum_database_activations_unconfirmed_total',
      help: `Databases made active after ${ACTIVATION_WAIT_MS / 1000} s without this data plane having applied their routes`,
      labelNames: ['dataplane'], registers: [d.registry],
    }) : undefined;
  }

  /** Whether `db` (its members and endpoints as they will be once active) may read `active` now. */
  async mayActivate(db: RoutedDatabase): Promise<boolean> {
    if (!this.d.routes) return true;
    const { waiting, refusing } = await this.d.routes.pending(db);
    const now = this.d.clock.now();
    const first = this.since.get(db.id);
    // Said once per wait, not at every report or poll of it.
    if (refusing.length > 0 && (first === undefined || waiting.length === 0)) {
      this.log.warn({ database: db.id, dataplanes: refusing }, 'not waiting for data planes that refused their last snapshot');
    }
    if (waiting.length === 0) {
      if (first !== undefined) this.log.info({ database: db.id, waitedMs: now - first }, 'the data planes applied the routes of a database');
      this.since.delete(db.id);
      return true;
    }
    if (first === undefined) {
      this.since.set(db.id, now);
      this.log.info({ database: db.id, dataplanes: waiting }, 'a database waits for the data planes to apply its routes');
      return false;
    }
    if (now - first < ACTIVATION_WAIT_MS) return false;
    this.since.delete(db.id);
    this.log.warn({ database: db.id, dataplanes: waiting, waitedMs: now - first }, 'a database is active before these data planes applied its routes');
    for (const dp of waiting) this.unconfirmed?.inc({ dataplane: dp });
    return true;
  }
}
