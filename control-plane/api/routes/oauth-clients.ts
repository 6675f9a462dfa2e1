import type { Router } from '../router.js';
import { paginate, parsePage } from '../pagination.js';
import { applyFilter, parseFilter } from '../filter.js';
import type { OAuthService } from '../../domain/auth/oauth-service.js';
import type { OAuthClientRecord } from '../../store/oauth-repository.js';

/** The OAuthClient object of @linode/api-v4 (account/types.d.ts); the secret only when just made. */
function clientToWire(c: OAuthClientRecord, secret?: string): Record<string, unknown> {
  return {
    id: c.id, label: c.label, public: c.public, redirect_uri: c.redirectUri,
    secret: secret ?? '<REDACTED>', status: 'active', thumbnail_url: null,
  };
}

/**
 * /account/oauth-clients: the OAuth clients of the install's login (docs/security/api.md, "OAuth
 * login"), registered by an unrestricted user, each with its one redirect URI.
 */
export function oauthClientRoutes(r: Router, d: { oauth: OAuthService }): void {
  r.get('/account/oauth-clients', 'account:read_only', async (c) => {
    const page = parsePage(c.query);
    const filter = parseFilter(c.headers['x-filter'] as string | undefined, ['id', 'label', 'public', 'redirect_uri']);
    return paginate(applyFilter((await d.oauth.listClients(c.actor)).map((x) => clientToWire(x)), filter), page);
  });
  r.post('/account/oauth-clients', 'account:read_write', async (c) => {
    const { client, secret } = await d.oauth.createClient(c.actor, c.body);
    return clientToWire(client, secret);
  });
  r.get('/account/oauth-clients/:clientId', 'account:read_only', async (c) => clientToWire(await d.oauth.getClient(c.actor, c.params.clientId ?? '')));
  r.put('/account/oauth-clients/:clientId', 'account:read_write', async (c) => clientToWire(await d.oauth.updateClient(c.actor, c.params.clientId ?? '', c.body)));
  r.delete('/account/oauth-clients/:clientId', 'account:read_write', async (c) => {
    await d.oauth.deleteClient(c.actor, c.params.clientId ?? '');
    return {};
  });
  r.post('/account/oauth-clients/:clientId/reset-secret', 'account:read_write', async (c) => {
    const { client, secret } = await d.oauth.resetSecret(c.actor, c.params.clientId ?? '');
    return clientToWire(client, secret);
  });
}
