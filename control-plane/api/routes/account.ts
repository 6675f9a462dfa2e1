import { wireTime } from '../../../lib/clock.js';
import { FulcrumError } from '../../../lib/errors.js';
import type { Router } from '../router.js';
import { idParam } from '../router.js';
import { applyFilter, parseFilter } from '../filter.js';
import { paginate, parsePage } from '../pagination.js';
import type { Actor, AuthService } from '../../domain/auth/auth-service.js';
import { eventToWire, type EventScope, type EventService } from '../../domain/events/event-service.js';
import type { Region, RegionCatalogue } from '../../domain/regions.js';

/**
 * A region as today's recorded responses carry it: every region here is a core site, the
 * placement-group limits are the service's defaults (Fulcrum has no placement groups), and
 * `monitors` (the products the monitoring service alerts on and graphs) is empty: Fulcrum has no
 * such service (docs/compatibility.md, "Regions").
 */
function regionToWire(r: Region): Record<string, unknown> {
  return {
    ...r, site_type: 'core', monitors: { alerts: [], metrics: [] },
    placement_group_limits: { maximum_linodes_per_flexible_pg: 5, maximum_linodes_per_pg: 5, maximum_pgs_per_customer: null },
  };
}
import type { TokenRecord } from '../../domain/auth/model.js';
import type { EventRecord } from '../../domain/events/model.js';

export function tokenToWire(t: TokenRecord, secret?: string): Record<string, unknown> {
  return {
    id: t.id,
    label: t.label,
    scopes: t.scopes,
    created: wireTime(t.created),
    expiry: t.expiry === null ? null : wireTime(t.expiry),
    // The full token is shown once, on create; afterwards only its first 16 characters.
    token: secret ?? t.tokenPrefix,
  };
}

/** /account/events, /profile/tokens, /regions: the account-level endpoints clients need. */
export function accountRoutes(r: Router, d: { auth: AuthService; events: EventService; regions: RegionCatalogue }): void {
  // A restricted user sees only events about entities it holds a grant on; others do not exist
  // for it (404), like entities missing from a list.
  const visible = (actor: Actor, e: EventRecord): boolean => {
    if (!actor.user.restricted || !e.entity) return true;
    const kind = e.entity.type;
    return (kind === 'nodebalancer' || kind === 'database') && d.auth.canRead(actor, kind, e.entity.id);
  };
  const visibleEvent = async (actor: Actor, id: number): Promise<EventRecord> => {
    const e = await d.events.get(id);
    if (!e || !visible(actor, e)) throw FulcrumError.notFound();
    return e;
  };

  // The same rule as `visible`, as the store applies it.
  const scope = (actor: Actor): EventScope => actor.user.restricted
    ? { entities: { nodebalancer: Object.keys(actor.user.grants.nodebalancer).map(Number), database: Object.keys(actor.user.grants.database).map(Number) } }
    : {};

  r.get('/account/events', 'events:read_only', async (c) => {
    const page = parsePage(c.query);
    const filter = parseFilter(c.headers['x-filter'] as string | undefined, ['id', 'action', 'created', 'entity.id', 'entity.type', 'read']);
    // An X-Filter is applied here, over every event in scope (bounded by pruning); without one the
    // store reads only the page asked for.
    if (filter) return paginate(applyFilter((await d.events.list(scope(c.actor))).map(eventToWire), filter), page);
    const { events, total } = await d.events.page(scope(c.actor), (page.page - 1) * page.pageSize, page.pageSize);
    return { data: events.map(eventToWire), page: page.page, pages: Math.max(1, Math.ceil(total / page.pageSize)), results: total };
  });
  r.get('/account/events/:eventId', 'events:read_only', async (c) => eventToWire(await visibleEvent(c.actor, idParam(c.params, 'eventId'))));
  r.post('/account/events/:eventId/seen', 'events:read_write', async (c) => {
    await d.events.markSeen((await visibleEvent(c.actor, idParam(c.params, 'eventId'))).id);
    return {};
  });
  r.post('/account/events/:eventId/read', 'events:read_write', async (c) => {
    await d.events.markRead((await visibleEvent(c.actor, idParam(c.params, 'eventId'))).id);
    return {};
  });

  r.get('/profile/tokens', 'account:read_only', async (c) => {
    const page = parsePage(c.query);
    const filter = parseFilter(c.headers['x-filter'] as string | undefined, ['created', 'label']);
    return paginate(applyFilter((await d.auth.listTokens(c.actor)).map((t) => tokenToWire(t)), filter), page);
  });
  r.post('/profile/tokens', 'account:read_write', async (c) => {
    const { record, secret } = await d.auth.createTokenFromRequest(c.actor, c.body);
    return tokenToWire(record, secret);
  });
  r.get('/profile/tokens/:tokenId', 'account:read_only', async (c) => tokenToWire(await d.auth.getToken(c.actor, idParam(c.params, 'tokenId'))));
  r.put('/profile/tokens/:tokenId', 'account:read_write', async (c) => tokenToWire(await d.auth.updateToken(c.actor, idParam(c.params, 'tokenId'), c.body)));
  r.delete('/profile/tokens/:tokenId', 'account:read_write', async (c) => {
    await d.auth.revokeToken(c.actor, idParam(c.params, 'tokenId'));
    return {};
  });

  r.publicGet('/regions', (c) => paginate(d.regions.list().map(regionToWire), parsePage(c.query)));
  r.publicGet('/regions/:regionId', (c) => {
    const region = d.regions.get(c.params.regionId ?? '');
    if (!region) throw FulcrumError.notFound();
    return regionToWire(region);
  });
}
