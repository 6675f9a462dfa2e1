import type { Clock } from '../../../lib/clock.js';
import { wireTime } from '../../../lib/clock.js';
import type { EventRepository } from '../../store/ports.js';
import type { EventRecord } from './model.js';

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
  constructor(
    private readonly repo: EventRepository,
    private readonly clock: Clock,
  ) {}

  record(action: string, entity: EntityRef | null, opts: { username?: string | null; status?: EventRecord['status']; message?: string | null; secondary?: EntityRef | null } = {}): Promise<EventRecord> {
    const status = opts.status ?? 'notification';
    return this.repo.create({
      created: Math.floor(this.clock.now() / 1000) * 1000,
      action,
      username: opts.username ?? null,
      entity,
      secondaryEntity: opts.secondary ?? null,
      status,
      percentComplete: status === 'finished' ? 100 : null,
      duration: status === 'finished' ? 0 : null,
      message: opts.message ?? null,
      seen: false,
      read: false,
    });
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

  list(): Promise<EventRecord[]> {
    return this.repo.list();
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
