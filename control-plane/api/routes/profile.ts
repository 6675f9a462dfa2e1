import { wireTime } from '../../../lib/clock.js';
import type { Router } from '../router.js';
import { paginate, parsePage } from '../pagination.js';
import type { AccountService, Notice } from '../../domain/account/account-service.js';
import { fixedSettings, readOnlyProfile } from '../../domain/account/account-service.js';
import type { User } from '../../domain/auth/model.js';

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
export function profileRoutes(r: Router, d: { account: AccountService }): void {
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
}
