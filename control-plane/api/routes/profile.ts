import { wireTime } from '../../../lib/clock.js';
import type { Router } from '../router.js';
import { paginate, parsePage } from '../pagination.js';
import type { AccountService, Notice } from '../../domain/account/account-service.js';
import { fixedSettings, readOnlyProfile } from '../../domain/account/account-service.js';
import type { User } from '../../domain/auth/model.js';
import type { RegionCatalogue } from '../../domain/regions.js';

/** The Profile object of @linode/api-v4 (profile/types.d.ts): what Fulcrum does not have reads as off or empty. */
function profileToWire(u: User): Record<string, unknown> {
  const out: Record<string, unknown> = { email: u.email, timezone: u.timezone };
  for (const [k, value] of Object.entries(readOnlyProfile)) out[k] = value(u);
  return out;
}

/**
 * The Account object for an install: a Fulcrum install has no billing, so the contact and
 * billing fields are empty and the balances zero, as the real service shows a new account.
 */
function accountToWire(capabilities: string[], adminEmail: string): Record<string, unknown> {
  return {
    active_promotions: [], active_since: '2018-01-01T00:00:00', address_1: '', address_2: '', balance: 0, balance_uninvoiced: 0,
    billing_source: 'linode', capabilities, city: '', company: '', country: '', credit_card: { expiry: null, last_four: null },
    email: adminEmail, euuid: '00000000-0000-0000-0000-000000000000', first_name: '', last_name: '', phone: '', state: '', tax_id: '', zip: '',
  };
}

function noticeToWire(n: Notice): Record<string, unknown> {
  return {
    type: n.type, severity: n.severity, label: n.label, message: n.message, body: null,
    entity: n.entity && { id: n.entity.id, label: n.entity.label, type: n.entity.kind, url: n.entity.url },
    when: n.when === null ? null : wireTime(n.when),
    until: n.until === null ? null : wireTime(n.until),
  };
}

/**
 * /profile, /profile/preferences, /account, /account/settings, /account/notifications and
 * /tags: what clients read before anything else (docs/api.md, "Profile and account").
 */
export function profileRoutes(r: Router, d: { account: AccountService; regions: RegionCatalogue }): void {
  // Any valid token may read its own profile, as linode-cli's configure does with whatever
  // scopes the token has (the real API answers /profile to every token).
  r.getAuthenticated('/profile', async (c) => profileToWire(await d.account.profile(c.actor)));
  r.put('/profile', 'account:read_write', async (c) => profileToWire(await d.account.updateProfile(c.actor, c.body)));
  r.get('/profile/preferences', 'account:read_only', (c) => d.account.preferences(c.actor));
  r.put('/profile/preferences', 'account:read_write', (c) => d.account.setPreferences(c.actor, c.body));

  r.get('/account', 'account:read_only', async (c) => accountToWire(d.account.account(c.actor).capabilities, (await d.account.profile(c.actor)).email));
  r.get('/account/settings', 'account:read_only', async (c) => ({ ...fixedSettings, ...(await d.account.settings(c.actor)) }));
  r.put('/account/settings', 'account:read_write', async (c) => ({ ...fixedSettings, ...(await d.account.updateSettings(c.actor, c.body)) }));
  r.get('/account/notifications', 'account:read_only', async (c) => paginate((await d.account.notifications(c.actor)).map(noticeToWire), parsePage(c.query)));

  r.get('/tags', 'account:read_only', async (c) => paginate((await d.account.tags(c.actor)).map((label) => ({ label })), parsePage(c.query)));
  r.get('/tags/:label', 'account:read_only', async (c) => {
    const found = await d.account.taggedWith(c.actor, c.params.label ?? '');
    return paginate(await Promise.all(found.map(async (e) => ({ type: e.kind, data: await e.show() }))), parsePage(c.query));
  });

  // Things Fulcrum does not have, answered as the real service answers an account with none of
  // them (docs/compatibility.md, "Endpoints for things Fulcrum does not have"): Cloud Manager
  // reads these while it renders the pages NodeBalancers and databases share.
  const none = (c: { query: Record<string, unknown> }) => paginate([], parsePage(c.query));
  r.get('/networking/firewalls', 'firewall:read_only', (c) => none(c));
  r.get('/profile/sshkeys', 'account:read_only', (c) => none(c));
  r.get('/account/maintenance', 'account:read_only', (c) => none(c));
  // No capability is withheld from the account in any region (the restrictions the real service
  // lists here are per-account limits Fulcrum does not have).
  r.get('/account/availability', 'account:read_only', (c) => paginate(d.regions.list().map((x) => ({ region: x.id, unavailable: [] })), parsePage(c.query)));
  // Nothing has been agreed to with anyone: an install has no billing or legal agreements.
  r.get('/account/agreements', 'account:read_only', () => ({ billing_agreement: false, eu_model: false, privacy_policy: false }));
}
