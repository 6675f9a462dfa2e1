import { call, type Page } from './api.js';
import { toast } from './ui.js';

/**
 * The person's own actions that finish later (create, snapshot, restore, suspend...): remembered
 * here when the console sends them, and announced as a toast when the events feed shows them
 * finished or failed (docs/console.md).
 */
interface Pending { type: string; id: number; action: string; since: number; label: string }
const pending: Pending[] = [];
const announced = new Set<number>();

export function track(type: string, id: number, action: string, label: string): void {
  // The event is recorded when the request is accepted, before the answer reaches the page, and
  // a busy machine can make that seconds: a minute of slack, and no event is announced twice.
  pending.push({ type, id, action, since: Date.now() - 60_000, label });
}

export interface EventWire {
  id: number; action: string; created: string; status: string; username: string; message: string | null;
  entity: { id: number; label: string; type: string } | null;
}

export async function newestEvents(pageSize = 100): Promise<EventWire[]> {
  const p = await call<Page<EventWire>>('GET', `/v4/account/events?page_size=${pageSize}`, undefined, {
    'x-filter': JSON.stringify({ '+order_by': 'id', '+order': 'desc' }),
  });
  return p.data;
}

export async function checkPending(): Promise<void> {
  if (pending.length === 0) return;
  const events = await newestEvents();
  for (const p of [...pending]) {
    const e = events.find((x) => !announced.has(x.id) && x.entity?.type === p.type && x.entity.id === p.id && x.action === p.action
      && (x.status === 'finished' || x.status === 'failed' || x.status === 'notification') && Date.parse(`${x.created}Z`) >= p.since);
    if (!e) continue;
    pending.splice(pending.indexOf(p), 1);
    announced.add(e.id);
    toast(`${p.action.replace(/_/g, ' ')} ${e.status === 'failed' ? 'failed' : 'finished'}: ${p.label}`, e.status === 'failed' ? 'fail' : 'ok');
  }
}
