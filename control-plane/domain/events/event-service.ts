import type { Clock } from '../../../lib/clock.js';
import { wireTime } from '../../../lib/clock.js';
import type { Logger } from '../../../lib/logger.js';
import type { EventRepository, EventScope } from './repository.js';
import type { EventRecord } from './model.js';

export type { EventScope };

/** How long events are kept and how many at most (docs/api.md, "Events"). */
export interface EventRetention {
  /** The real service keeps 90 days of events. */
  maxAgeMs: number;
  /** A cap on the table whatever their age, so a busy account cannot grow it without bound. */
  maxEvents: number;
  /** Pruning runs after this many events recorded, and on the first one after `pruneEveryMs`. */
  pruneEveryEvents: number;
  pruneEveryMs: number;
}

export const defaultEventRetention: EventRetention = {
  maxAgeMs: 90 * 86_400_000,
  maxEvents: 10_000,
  pruneEveryEvents: 100,
  pruneEveryMs: 10 * 60_000,
};

export interface EntityRef {
  id: number;
  type: string; // nodebalancer | database
  label: string;
  url: string;
}

/**
 * The account event log (/v4/account/events). Short actions are written once as `notification`;
 * long work (database create, update, backups) starts as `notification` and the same event id is
 * later moved to `finished` or `failed`, which is what Terraform and linodego poll for.
 */
export class EventService {
  private readonly retention: EventRetention;
  private readonly logger: Logger | undefined;
  private recordedSincePrune = 0;
  private lastPrune = -Infinity;

  constructor(
    private readonly repo: EventRepository,
    private readonly clock: Clock,
    opts: { retention?: Partial<EventRetention>; logger?: Logger } = {},
  ) {
    this.retention = { ...defaultEventRetention, ...opts.retention };
    this.logger = opts.logger;
  }

  /** `hosts`: the agent hosts the event is about (EventRecord.hosts), each named once. */
  async record(action: string, entity: EntityRef | null, opts: {
    username?: string | null; status?: EventRecord['status']; message?: string | null; secondary?: EntityRef | null; hosts?: readonly string[];
  } = {}): Promise<EventRecord> {
    const hosts = [...new Set(opts.hosts ?? [])].filter((h) => h !== '');
    const status = opts.status ?? 'notification';
    const created = await this.repo.create({
      created: Math.floor(this.clock.now() / 1000) * 1000,
      action,
      username: opts.username ?? null,
      entity,
      secondaryEntity: opts.secondary ?? null,
      status,
      percentComplete: status === 'finished' ? 100 : null,
      duration: status === 'finished' ? 0 : null,
      message: opts.message ?? null,
      ...(hosts.length > 0 ? { hosts } : {}),
      seen: false,
      read: false,
    });
    const now = this.clock.now();
    if (++this.recordedSincePrune >= this.retention.pruneEveryEvents || now - this.lastPrune >= this.retention.pruneEveryMs) {
      // A failed prune must not fail the change that recorded the event; the next one tries again.
      await this.prune().catch((err) => this.logger?.warn({ err }, 'events not pruned'));
    }
    return created;
  }

  /**
   * Deletes the events older than the retention age, then the oldest beyond the cap. Runs from
   * `record` (every `pruneEveryEvents` events or `pruneEveryMs`), so the table holds at most
   * about `maxEvents + pruneEveryEvents` rows.
   */
  prune(): Promise<number> {
    const now = this.clock.now();
    this.recordedSincePrune = 0;
    this.lastPrune = now;
    return this.repo.prune(now - this.retention.maxAgeMs, this.retention.maxEvents);
  }

  /** Moves a long-running event to `finished` (100%) or `failed`, with its duration in seconds. */
  async complete(id: number, outcome: 'finished' | 'failed', message?: string): Promise<void> {
    const e = await this.repo.get(id);
    if (!e) return;
    await this.repo.update(id, {
      status: outcome,
      percentComplete: outcome === 'finished' ? 100 : e.percentComplete,
      duration: Math.max(0, Math.round((this.clock.now() - e.created) / 1000)),
      ...(message !== undefined ? { message } : {}),
    });
  }

  progress(id: number, percent: number): Promise<void> {
    return this.repo.update(id, { status: 'started', percentComplete: Math.max(0, Math.min(99, Math.round(percent))) });
  }

  /** Every event in scope, newest first: bounded by the retention, read only for filtered lists. */
  list(scope: EventScope = {}): Promise<EventRecord[]> {
    return this.repo.list(scope);
  }

  /** One page of the events in scope, newest first, and how many there are in all. */
  async page(scope: EventScope, offset: number, limit: number): Promise<{ events: EventRecord[]; total: number }> {
    const [events, total] = await Promise.all([this.repo.page(scope, offset, limit), this.repo.count(scope)]);
    return { events, total };
  }

  get(id: number): Promise<EventRecord | undefined> {
    return this.repo.get(id);
  }

  markSeen(id: number): Promise<void> {
    return this.repo.markSeenUpTo(id);
  }

  markRead(id: number): Promise<void> {
    return this.repo.update(id, { read: true });
  }
}

/** The wire shape of an event, as the real API sends it. */
export function eventToWire(e: EventRecord): Record<string, unknown> {
  return {
    id: e.id,
    action: e.action,
    created: wireTime(e.created),
    duration: e.duration,
    entity: e.entity,
    secondary_entity: e.secondaryEntity,
    // Recorded real events carry a string here, empty when there is nothing to say.
    message: e.message ?? '',
    percent_complete: e.percentComplete,
    rate: null,
    read: e.read,
    seen: e.seen,
    status: e.status,
    time_remaining: null,
    username: e.username,
  };
}
