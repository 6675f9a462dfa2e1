import { FulcrumError } from '../../../lib/errors.js';
import { NO_CONTENT, type Router } from '../router.js';
import { applyFilter, parseFilter } from '../filter.js';
import { paginate, parsePage } from '../pagination.js';
import type { AuthService } from '../../domain/auth/auth-service.js';
import type { UserService } from '../../domain/auth/user-service.js';
import type { User } from '../../domain/auth/model.js';
import { tokenToWire } from './account.js';

/** The 4.176 User object (with UserType); login, 2FA and SSH keys do not exist here, so they are empty. */
function userToWire(u: User): Record<string, unknown> {
  return {
    username: u.username,
    email: u.email,
    restricted: u.restricted,
    ssh_keys: [],
    tfa_enabled: false,
    verified_phone_number: null,
    password_created: null,
    last_login: null,
    user_type: 'default',
  };
}

/**
 * /account/users (+ grants), /profile/grants, and the Fulcrum-only token endpoint an operator
 * uses to give a user its first token (there is no login in Fulcrum).
 */
export function userRoutes(r: Router, d: { users: UserService; auth: AuthService }): void {
  const name = (p: Record<string, string>) => {
    const v = p.username ?? '';
    if (v.length === 0 || v.length > 64) throw FulcrumError.notFound();
    return v;
  };
  r.get('/account/users', 'account:read_only', async (c) => {
    const page = parsePage(c.query);
    const filter = parseFilter(c.headers['x-filter'] as string | undefined, ['username']);
    return paginate(applyFilter((await d.users.list(c.actor)).map(userToWire), filter), page);
  });
  r.post('/account/users', 'account:read_write', async (c) => userToWire(await d.users.create(c.actor, c.body)));
  r.get('/account/users/:username', 'account:read_only', async (c) => userToWire(await d.users.get(c.actor, name(c.params))));
  r.put('/account/users/:username', 'account:read_write', async (c) => userToWire(await d.users.update(c.actor, name(c.params), c.body)));
  r.delete('/account/users/:username', 'account:read_write', async (c) => {
    await d.users.delete(c.actor, name(c.params));
    return {};
  });
  r.get('/account/users/:username/grants', 'account:read_only', (c) => d.users.grants(c.actor, name(c.params)));
  r.put('/account/users/:username/grants', 'account:read_write', (c) => d.users.updateGrants(c.actor, name(c.params), c.body));
  r.getAuthenticated('/profile/grants', async (c) => (await d.users.profileGrants(c.actor)) ?? NO_CONTENT);

  r.post('/fulcrum/users/:username/tokens', 'account:read_write', async (c) => {
    const user = await d.users.get(c.actor, name(c.params));
    const { record, secret } = await d.auth.createTokenFromRequest(c.actor, c.body, user);
    return tokenToWire(record, secret);
  });
}
