import type { Logger } from '../../../lib/logger.js';
import type { EventService } from '../events/event-service.js';
import type { DatabaseRepository } from './repository.js';
import { databaseRef } from './database-service.js';
import type { DatabaseRecord } from './model.js';

/** One listener a data plane said it could not open: an `address:port: reason` of its NACK. */
export interface UnboundListener {
  address: string;
  port: number;
  reason: string;
}

const LISTEN_FAILURE = 'cannot listen on ';
const ENTRY = /^(\d{1,3}(?:\.\d{1,3}){3}):(\d{1,5}): (.+)$/;

/**
 * The IPv4 listeners a data plane's NACK says it could not open ("cannot listen on a:p: CODE,
 * b:q: CODE", dataplane/listeners/listener-set.ts); none for any other refusal. Pure.
 */
export function unboundListeners(detail: string): UnboundListener[] {
  const at = detail.indexOf(LISTEN_FAILURE);
  if (at < 0) return [];
  return detail.slice(at + LISTEN_FAILURE.length).split(', ').flatMap((entry) => {
    const m = ENTRY.exec(entry.trim());
    return m ? [{ address: m[1]!, port: Number(m[2]), reason: m[3]! }] : [];
  });
}

export interface EndpointServingDeps {
  repo: DatabaseRepository;
  events: EventService;
  logger: Logger;
}

/**
 * What the data planes' answers say about database endpoints (docs/databases.md, "An endpoint a
 * data plane cannot serve"). A data plane that cannot listen on a database's hosts.primary or
 * hosts.secondary refuses the whole snapshot and keeps serving its previous one, so the endpoint
 * is not served there: the database gets a failed database_update event naming the data plane,
 * the endpoint and the reason, once per data plane, endpoint and reason; the data plane's next
 * ACK (it applied a snapshot holding every endpoint) gets a notification that it serves it now.
 * The database's status stays what its members are: its servers run, the endpoint is what fails.
 * Kept in memory of the replica holding that data plane's stream: one holding the stream after a
 * reconnect says it again at most once.
 */
export class EndpointServing {
  private readonly log: Logger;
  /** Per data plane: `database/role` -> the reason it cannot listen there. */
  private readonly failing = new Map<string, Map<string, { reason: string; address: string; port: number }>>();

  constructor(private readonly d: EndpointServingDeps) {
    this.log = d.logger.child({ component: 'endpoint-serving' });
  }

  /** A data plane answered a snapshot: ACK (`error` undefined) or NACK with its reason. */
  async answered(dataplane: string, error: string | undefined): Promise<void> {
    if (error === undefined) return this.served(dataplane);
    const unbound = unboundListeners(error);
    if (unbound.length === 0) return;
    const dbs = (await this.d.repo.list()).filter((db) => !db.deleting);
    const mine = this.failing.get(dataplane) ?? new Map<string, { reason: string; address: string; port: number }>();
    for (const u of unbound) {
      for (const { db, role } of endpointsAt(dbs, u.address, u.port)) {
        const key = `${db.id}/${role}`;
        if (mine.get(key)?.reason === u.reason) continue;
        mine.set(key, { reason: u.reason, address: u.address, port: u.port });
        this.log.warn({ dataplane, database: db.id, role, address: u.address, reason: u.reason }, 'a data plane cannot serve a database endpoint');
        await this.d.events.record('database_update', databaseRef(db), {
          status: 'failed',
          message: `Data plane ${dataplane} cannot listen on hosts.${role} ${u.address}:${u.port} (${u.reason}): the endpoint is not served there, and that data plane keeps its previous configuration until it can.`,
        });
      }
    }
    if (mine.size > 0) this.failing.set(dataplane, mine);
  }

  private async served(dataplane: string): Promise<void> {
    const mine = this.failing.get(dataplane);
    if (!mine) return;
    this.failing.delete(dataplane);
    for (const [key, f] of mine) {
      const [id, role] = key.split('/') as [string, 'primary' | 'secondary'];
      const db = await this.d.repo.get(Number(id));
      // A database gone, or whose address moved, has nothing served to report.
      if (!db || db.deleting || endpointsAt([db], f.address, f.port).length === 0) continue;
      await this.d.events.record('database_update', databaseRef(db), {
        status: 'notification',
        message: `Data plane ${dataplane} now serves hosts.${role} ${f.address}:${f.port}.`,
      });
    }
  }
}

function endpointsAt(dbs: readonly DatabaseRecord[], address: string, port: number): { db: DatabaseRecord; role: 'primary' | 'secondary' }[] {
  return dbs.flatMap((db): { db: DatabaseRecord; role: 'primary' | 'secondary' }[] => {
    if (db.port !== port) return [];
    if (db.hostPrimary === address) return [{ db, role: 'primary' }];
    if (db.hostSecondary === address) return [{ db, role: 'secondary' }];
    return [];
  });
}
