import { until } from '../../helpers/lab.js';
import type { ApiHarness } from '../../helpers/api-harness.js';

export { until };

export const MYSQL = '/v4/databases/mysql/instances';

/** The first engine id the catalogue offers (the local server in the lab). */
export async function firstEngine(api: ApiHarness): Promise<string> {
  const r = await api.req('GET', '/v4/databases/engines', { token: null });
  if (r.body.data.length === 0) throw new Error('no engine in the catalogue: is mariadbd installed?');
  return r.body.data[0].id as string;
}

export async function waitStatus(api: ApiHarness, id: number, status: string, timeoutMs = 20_000): Promise<any> {
  return until(`database ${id} ${status}`, async () => {
    const r = await api.req('GET', `${MYSQL}/${id}`);
    return r.body.status === status ? r.body : undefined;
  }, timeoutMs);
}

export async function eventsFor(api: ApiHarness, id: number, action?: string): Promise<any[]> {
  const filter: Record<string, unknown> = { 'entity.id': id, 'entity.type': 'database' };
  if (action) filter.action = action;
  const r = await api.req('GET', '/v4/account/events', { headers: { 'x-filter': JSON.stringify(filter) } });
  return r.body.data;
}
