// integration-lane: concurrent (startApi: an in-process control plane on port 0 with a temp state folder; addresses only as data, nothing bound but port 0).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { apiErrors, pointLinodeClientAt, sdk } from '../../helpers/api-linode-client.js';
import { ShiftedClock } from '../../helpers/clocks.js';
import { validatedOperations } from '../../helpers/api-schema.js';
import { oauthClientTypedOperations } from '../../helpers/api-v4-shapes.js';
import { openSignIn, pkce, postSignIn, registerClient, signIn, tokenRequest } from '../../helpers/oauth.js';

/**
 * /account/oauth-clients through @linode/api-v4 0.158.0 (every body checked against its
 * OAuthClient type: test/helpers/api-v4-shapes.ts), and what the login issues to those clients:
 * a confidential client's code flow (form-urlencoded, HTTP Basic), scopes never beyond the
 * signing-in token's, expiry, revocation, a reset secret, a deleted client.
 */
const { createOAuthClient, deleteOAuthClient, getOAuthClient, getOAuthClients, resetOAuthClientSecret, updateOAuthClient } = sdk;

describe('OAuth clients through @linode/api-v4, and the tokens the login issues them', () => {
  let api: ApiHarness;
  let token: string | null;
  let unpoint: () => void;
  const clock = new ShiftedClock();

  beforeAll(async () => {
    api = await startApi({ clock });
    token = api.token;
    unpoint = pointLinodeClientAt(api.url, () => token);
  });
  afterAll(async () => {
    unpoint?.();
    await api?.close();
  });

  it('creates, lists, reads, updates, resets and deletes clients; the secret is shown only when made', async () => {
    const pub = await createOAuthClient({ label: 'cloud-manager', redirect_uri: 'http://localhost:3000/oauth/callback', public: true });
    expect(pub).toMatchObject({ label: 'cloud-manager', public: true, redirect_uri: 'http://localhost:3000/oauth/callback', secret: '', status: 'active', thumbnail_url: null });
    expect(pub.id).toMatch(/^[0-9a-f]{20}$/);
    const conf = await createOAuthClient({ label: 'backend-app', redirect_uri: 'https://app.example.test/cb' });
    expect(conf.public).toBe(false);
    expect(conf.secret).toMatch(/^[0-9a-f]{64}$/);

    const list = await getOAuthClients();
    expect(list.data.map((c: { label: string }) => c.label)).toEqual(['linode-cli', 'cloud-manager', 'backend-app']);
    expect(list.data.every((c: { secret: string }) => c.secret === '<REDACTED>')).toBe(true);
    expect((await getOAuthClients({}, { label: 'backend-app' })).data.map((c: { id: string }) => c.id)).toEqual([conf.id]);
    expect(await getOAuthClient(conf.id)).toMatchObject({ id: conf.id, secret: '<REDACTED>' });

    expect(await updateOAuthClient(conf.id, { label: 'backend', redirect_uri: 'https://app.example.test/callback' }))
      .toMatchObject({ id: conf.id, label: 'backend', redirect_uri: 'https://app.example.test/callback', secret: '<REDACTED>' });
    const reset = await resetOAuthClientSecret(conf.id);
    expect(reset.secret).toMatch(/^[0-9a-f]{64}$/);
    expect(reset.secret).not.toBe(conf.secret);
    expect(await apiErrors(resetOAuthClientSecret(pub.id))).toEqual({ status: 400, errors: [{ reason: 'A public client has no secret' }] });

    await deleteOAuthClient(pub.id);
    expect((await apiErrors(getOAuthClient(pub.id))).status).toBe(404);
    expect((await apiErrors(getOAuthClient('not-an-id'))).status).toBe(404);
  });

  it('refuses bad fields by name, unknown fields, restricted users and read-only tokens', async () => {
    for (const redirect_uri of ['https://a.test/cb#frag', 'https://a.test/cb?x=1', 'ftp://a.test/cb', 'https://user:pw@a.test/cb', 'not a url', `https://a.test/${'x'.repeat(520)}`]) {
      expect(await apiErrors(createOAuthClient({ label: 'x', redirect_uri })), redirect_uri).toEqual({
        status: 400, errors: [{ field: 'redirect_uri', reason: 'redirect_uri must be an http or https URL without a query or fragment' }],
      });
    }
    const unknown = await api.req('POST', '/v4/account/oauth-clients', { body: { label: 'x', redirect_uri: 'https://a.test/cb', implicit: true } });
    expect(unknown.status).toBe(400);
    expect(unknown.body.errors).toEqual([{ field: 'implicit', reason: 'implicit is not a field of an OAuth client' }]);
    const pub = await api.req('POST', '/v4/account/oauth-clients', { body: { label: 'x', redirect_uri: 'https://a.test/cb', public: 'yes' } });
    expect(pub.body.errors).toEqual([{ field: 'public', reason: 'public must be a boolean' }]);

    const restricted = await api.userToken('oc-restricted', { restricted: true });
    expect((await api.req('GET', '/v4/account/oauth-clients', { token: restricted })).status).toBe(403);
    const readOnly = await api.userToken('oc-reader', { restricted: false, scopes: 'account:read_only' });
    expect((await api.req('GET', '/v4/account/oauth-clients', { token: readOnly })).status).toBe(200);
    expect((await api.req('POST', '/v4/account/oauth-clients', { token: readOnly, body: { label: 'x', redirect_uri: 'https://a.test/cb' } })).status).toBe(401);
  });

  it('a confidential client: code flow with its secret (form body or HTTP Basic), scopes within the signing-in token, expiry, revocation', async () => {
    const app = await registerClient(api, { label: 'tf-helper', redirect_uri: 'https://app.example.test/cb' });
    const reader = await api.userToken('oc-nb-reader', { restricted: false, scopes: 'nodebalancers:read_only account:read_only' });
    const params = { client_id: app.id, response_type: 'code', scope: '*', state: 'x' };

    // `*` asks for all the signing-in token has; more than it has is refused on the page.
    const code = new URL(await signIn(api.url, params, reader)).searchParams.get('code')!;
    const noSecret = await tokenRequest(api.url, { client_id: app.id, code }, 'form');
    expect(noSecret).toEqual({ status: 401, body: { error: 'invalid_client', error_description: 'The client secret is missing or wrong' } });
    const code2 = new URL(await signIn(api.url, params, reader)).searchParams.get('code')!;
    const basic = `Basic ${Buffer.from(`${app.id}:${app.secret}`).toString('base64')}`;
    const got = await tokenRequest(api.url, { code: code2, redirect_uri: 'https://app.example.test/cb' }, 'form', { authorization: basic });
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ token_type: 'bearer', expires_in: 7200, scopes: 'nodebalancers:read_only account:read_only' });
    const issued = got.body.access_token as string;
    expect((await api.req('GET', '/v4/nodebalancers', { token: issued })).status).toBe(200);
    expect((await api.req('POST', '/v4/nodebalancers', { token: issued, body: { region: 'us-east' } })).status).toBe(401);
    const tokens = await api.req('GET', '/v4/profile/tokens', { token: issued });
    expect(tokens.body.data.find((t: { label: string; expiry: string | null }) => t.label === 'tf-helper (OAuth)')?.expiry).not.toBeNull();

    const beyond = await openSignIn(api.url, { ...params, scope: 'databases:read_write' });
    const refused = await postSignIn(api.url, { ...beyond.fields, token: reader }, beyond.cookie!);
    expect(refused.status).toBe(400);
    expect(refused.html).toContain('The token you signed in with does not allow databases:read_write');

    // Revoked by its client (RFC 7009); another client's revoke of it changes nothing.
    const other = await registerClient(api, { label: 'other', redirect_uri: 'https://other.example.test/cb', public: true });
    const revokeAs = (clientId: string, extra: Record<string, string> = {}) =>
      fetch(`${api.url}/login/oauth/revoke`, { method: 'POST', body: new URLSearchParams({ client_id: clientId, token: issued, ...extra }) });
    expect((await revokeAs(other.id)).status).toBe(200);
    expect((await api.req('GET', '/v4/profile', { token: issued })).status).toBe(200);
    expect((await revokeAs(app.id)).status).toBe(401);
    expect((await revokeAs(app.id, { client_secret: app.secret })).status).toBe(200);
    expect((await api.req('GET', '/v4/profile', { token: issued })).status).toBe(401);

    // A token issued now is refused once its two hours are over (the injected clock moves).
    const code3 = new URL(await signIn(api.url, params, reader)).searchParams.get('code')!;
    const later = await tokenRequest(api.url, { client_id: app.id, client_secret: app.secret, code: code3 });
    expect((await api.req('GET', '/v4/profile', { token: later.body.access_token })).status).toBe(200);
    clock.set(clock.now() + 2 * 3600_000 + 1000);
    expect((await api.req('GET', '/v4/profile', { token: later.body.access_token })).status).toBe(401);
  });

  it('reads a multipart body whose boundary has capitals, as Chromium sends it; refuses JSON bodies and repeated fields', async () => {
    const app = await registerClient(api, { label: 'mp', redirect_uri: 'https://mp.example.test/cb', public: true });
    const { verifier, challenge } = pkce();
    const code = new URL(await signIn(api.url, { client_id: app.id, response_type: 'code', code_challenge: challenge, code_challenge_method: 'S256' }, api.token)).searchParams.get('code')!;
    const b = '----WebKitFormBoundaryAbCdEfGh12';
    const part = (k: string, v: string) => `--${b}\r\nContent-Disposition: form-data; name="${k}"\r\n\r\n${v}\r\n`;
    const body = part('grant_type', 'authorization_code') + part('client_id', app.id) + part('code', code) + part('code_verifier', verifier) + `--${b}--\r\n`;
    const r = await fetch(`${api.url}/login/oauth/token`, { method: 'POST', body, headers: { 'content-type': `multipart/form-data; boundary=${b}` } });
    expect(r.status).toBe(200);
    expect(r.headers.get('access-control-allow-origin')).toBe('*');
    expect((await r.json()).token_type).toBe('bearer');

    const json = await fetch(`${api.url}/login/oauth/token`, { method: 'POST', body: JSON.stringify({ client_id: app.id }), headers: { 'content-type': 'application/json' } });
    expect(json.status).toBe(400);
    expect((await json.json()).error).toBe('invalid_request');
    const twice = await fetch(`${api.url}/login/oauth/token`, { method: 'POST', body: `client_id=${app.id}&code=a&code=b`, headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    expect(await twice.json()).toEqual({ error: 'invalid_request', error_description: 'code must be given once' });
  });

  it('deleting a client revokes what it was issued; clients are capped', async () => {
    const app = await registerClient(api, { label: 'short-lived', redirect_uri: 'https://sl.example.test/cb', public: true });
    const { verifier, challenge } = pkce();
    const loc = await signIn(api.url, { client_id: app.id, response_type: 'code', code_challenge: challenge, code_challenge_method: 'S256' }, api.token);
    const got = await tokenRequest(api.url, { client_id: app.id, code: new URL(loc).searchParams.get('code')!, code_verifier: verifier });
    expect((await api.req('GET', '/v4/profile', { token: got.body.access_token })).status).toBe(200);
    await deleteOAuthClient(app.id);
    expect((await api.req('GET', '/v4/profile', { token: got.body.access_token })).status).toBe(401);

    const have = (await getOAuthClients({ page_size: 500 })).results as number;
    for (let i = have; i < 100; i++) await registerClient(api, { label: `c${i}`, redirect_uri: 'https://c.example.test/cb' });
    expect(await apiErrors(createOAuthClient({ label: 'one-too-many', redirect_uri: 'https://c.example.test/cb' })))
      .toEqual({ status: 400, errors: [{ reason: 'An account may have at most 100 OAuth clients' }] });
  });

  it('checked every /account/oauth-clients answer against the SDK\'s type', () => {
    expect(Object.keys(oauthClientTypedOperations).filter((op) => !validatedOperations.has(op))).toEqual([]);
  });
});
