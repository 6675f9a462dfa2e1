import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../helpers/api-harness.js';
import { ShiftedClock } from '../helpers/clocks.js';
import { openSignIn, pkce, postSignIn, registerClient, signIn, tokenRequest } from '../helpers/oauth.js';

/**
 * Attacks on the install's OAuth login (docs/security/api.md, "OAuth login"): a replayed code, a
 * foreign redirect URI, a missing or wrong PKCE verifier, a code stolen by another client, a
 * sign-in form posted from another site, the implicit grant for a client not registered for it,
 * an expired code, and one user filling the pending codes. Each is performed against a real control plane over HTTP, next to the
 * legitimate flow it is a variation of, which must succeed (so none of these passes on an
 * install without the login).
 */
describe('OAuth login attacks', () => {
  let api: ApiHarness;
  const clock = new ShiftedClock();
  const callback = 'https://cm.example.test/oauth/callback';
  let cm: { id: string; secret: string };
  let other: { id: string; secret: string };

  beforeAll(async () => {
    api = await startApi({ clock });
    cm = await registerClient(api, { label: 'cloud-manager', redirect_uri: callback, public: true });
    other = await registerClient(api, { label: 'other-app', redirect_uri: 'https://other.example.test/cb', public: false });
  });
  afterAll(async () => {
    await api?.close();
  });

  const codeParams = (challenge: string, extra: Record<string, string> = {}) => ({
    client_id: cm.id, redirect_uri: `${callback}?returnTo=/linodes`, response_type: 'code', scope: '*', state: 'st-1',
    code_challenge: challenge, code_challenge_method: 'S256', ...extra,
  });
  const codeFrom = (location: string) => {
    const u = new URL(location);
    expect(`${u.origin}${u.pathname}`).toBe(callback);
    expect(u.searchParams.get('state')).toBe('st-1');
    return u.searchParams.get('code')!;
  };
  const profileStatus = async (token: string) => (await api.req('GET', '/v4/profile', { token })).status;

  it('a code used twice is refused, and the token it gave is revoked', async () => {
    const { verifier, challenge } = pkce();
    const code = codeFrom(await signIn(api.url, codeParams(challenge), api.token));
    const first = await tokenRequest(api.url, { grant_type: 'authorization_code', client_id: cm.id, code, code_verifier: verifier });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ token_type: 'bearer', expires_in: 7200, scopes: '*' });
    expect(await profileStatus(first.body.access_token)).toBe(200);

    const replay = await tokenRequest(api.url, { grant_type: 'authorization_code', client_id: cm.id, code, code_verifier: verifier }, 'form');
    expect(replay).toEqual({ status: 400, body: { error: 'invalid_grant', error_description: 'The code has been used already' } });
    expect(await profileStatus(first.body.access_token)).toBe(401);
  });

  it('a redirect URI other than the registered one is refused on the page, with no redirect and no code', async () => {
    const { challenge } = pkce();
    const foreign = [
      'https://evil.example.test/oauth/callback',
      'https://cm.example.test/oauth/callback/../../evil',
      'https://cm.example.test/oauth/callbackx',
      'https://cm.example.test.evil.example/oauth/callback',
      'https://cm.example.test@evil.example/oauth/callback',
      'https://cm.example.test/oauth/callback#x',
      'http://cm.example.test/oauth/callback',
      'https://cm.example.test:8443/oauth/callback',
    ];
    for (const redirect_uri of foreign) {
      const p = await openSignIn(api.url, codeParams(challenge, { redirect_uri }));
      expect(p.status, redirect_uri).toBe(400);
      expect(p.location, redirect_uri).toBeNull();
      expect(p.html).toContain('redirect_uri is not the redirect URI registered for this client');
    }
    // The form posted straight away with a foreign redirect URI (CSRF cookie and all) is refused too.
    const good = await openSignIn(api.url, codeParams(challenge));
    expect(good.status).toBe(200);
    const forged = await postSignIn(api.url, { ...good.fields, redirect_uri: foreign[0]!, token: api.token }, good.cookie!);
    expect(forged.status).toBe(400);
    expect(forged.location).toBeNull();
    expect(forged.html).toContain('redirect_uri is not the redirect URI registered for this client');
  });

  it('a missing or wrong PKCE verifier gets no token; a public client must send a S256 challenge', async () => {
    const { verifier, challenge } = pkce();
    const code = codeFrom(await signIn(api.url, codeParams(challenge), api.token));
    const missing = await tokenRequest(api.url, { grant_type: 'authorization_code', client_id: cm.id, code });
    expect(missing).toEqual({ status: 400, body: { error: 'invalid_grant', error_description: 'code_verifier is required' } });

    const code2 = codeFrom(await signIn(api.url, codeParams(challenge), api.token));
    const wrong = await tokenRequest(api.url, { grant_type: 'authorization_code', client_id: cm.id, code: code2, code_verifier: pkce().verifier });
    expect(wrong).toEqual({ status: 400, body: { error: 'invalid_grant', error_description: 'code_verifier does not match the code_challenge' } });
    // Refused codes are spent: the right verifier afterwards gets nothing either.
    const late = await tokenRequest(api.url, { grant_type: 'authorization_code', client_id: cm.id, code: code2, code_verifier: verifier });
    expect(late).toEqual({ status: 400, body: { error: 'invalid_grant', error_description: 'The code has been used already' } });

    // Without a challenge, or with the `plain` method, the page sends the client an error and no code.
    for (const extra of [{ code_challenge: '', code_challenge_method: '' }, { code_challenge: verifier, code_challenge_method: 'plain' }]) {
      const params: Record<string, string> = codeParams(challenge, extra);
      if (extra.code_challenge === '') {
        delete params.code_challenge;
        delete params.code_challenge_method;
      }
      const p = await openSignIn(api.url, params);
      expect(p.status).toBe(303);
      const u = new URL(p.location!);
      expect(u.searchParams.get('error')).toBe('invalid_request');
      expect(u.searchParams.get('code')).toBeNull();
    }
  });

  it('a code stolen by another client (with its own valid secret) is refused', async () => {
    const { verifier, challenge } = pkce();
    const code = codeFrom(await signIn(api.url, codeParams(challenge), api.token));
    const stolen = await tokenRequest(api.url, { grant_type: 'authorization_code', client_id: other.id, client_secret: other.secret, code, code_verifier: verifier });
    expect(stolen).toEqual({ status: 400, body: { error: 'invalid_grant', error_description: 'The code was not issued to this client' } });
    // Another client without its secret is not even authenticated.
    const noSecret = await tokenRequest(api.url, { client_id: other.id, code, code_verifier: verifier });
    expect(noSecret.status).toBe(401);
    expect(noSecret.body.error).toBe('invalid_client');
  });

  it('a sign-in form posted from another site (no CSRF cookie, or another one) is refused', async () => {
    const { challenge } = pkce();
    const page = await openSignIn(api.url, codeParams(challenge));
    expect(page.status).toBe(200);
    expect(page.cookie).toMatch(/^[0-9a-f]{64}$/);
    const fields: Record<string, string> = { ...page.fields, token: api.token };
    for (const cookie of [null, 'a'.repeat(64)]) {
      const r = await postSignIn(api.url, fields, cookie);
      expect(r.status).toBe(403);
      expect(r.location).toBeNull();
    }
    const { csrf_token: _dropped, ...withoutField } = fields;
    expect((await postSignIn(api.url, withoutField, page.cookie!)).status).toBe(403);
    // The same form from the page itself goes through.
    const ok = await postSignIn(api.url, fields, page.cookie!);
    expect(ok.status).toBe(303);
    expect(new URL(ok.location!).searchParams.get('code')).toMatch(/^[0-9a-f]{40}$/);
  });

  it('the implicit grant is refused to a client not registered for it, and works for linode-cli\'s', async () => {
    const params = { client_id: cm.id, redirect_uri: callback, response_type: 'token', scopes: '*', state: 'st-2' };
    const p = await openSignIn(api.url, params);
    expect(p.status).toBe(303);
    const frag = new URLSearchParams(new URL(p.location!).hash.slice(1));
    expect(frag.get('error')).toBe('unauthorized_client');
    expect(frag.get('access_token')).toBeNull();
    // A forged form for it is refused the same way (a valid CSRF pair from a code-flow page).
    const page = await openSignIn(api.url, codeParams(pkce().challenge));
    const forged = await postSignIn(api.url, { csrf_token: page.fields.csrf_token!, ...params, token: api.token }, page.cookie!);
    expect(forged.status).toBe(303);
    expect(new URLSearchParams(new URL(forged.location!).hash.slice(1)).get('access_token')).toBeNull();

    // linode-cli: its fixed client id, a localhost redirect on whatever port it listens on.
    const cli = await signIn(api.url, { client_id: '5823b4627e45411d18e9', response_type: 'token', scopes: '*', redirect_uri: 'http://localhost:41234' }, api.token);
    const token = /access_token=([a-z0-9]+)/.exec(cli)?.[1];
    expect(cli.startsWith('http://localhost:41234#')).toBe(true);
    expect(await profileStatus(token!)).toBe(200);
  });

  it('a code is refused once its minute is over (the injected clock moves)', async () => {
    const { verifier, challenge } = pkce();
    const code = codeFrom(await signIn(api.url, codeParams(challenge), api.token));
    clock.set(clock.now() + 61_000);
    const late = await tokenRequest(api.url, { grant_type: 'authorization_code', client_id: cm.id, code, code_verifier: verifier });
    expect(late).toEqual({ status: 400, body: { error: 'invalid_grant', error_description: 'The code has expired' } });
  });

  it('one user cannot pile up pending codes: the 21st sign-in waits until some are used or expire', async () => {
    const user = await api.userToken('oauth-piler', { restricted: false });
    const { verifier, challenge } = pkce();
    const codes: string[] = [];
    for (let i = 0; i < 20; i++) codes.push(codeFrom(await signIn(api.url, codeParams(challenge), user)));
    const page = await openSignIn(api.url, codeParams(challenge));
    const refused = await postSignIn(api.url, { ...page.fields, token: user }, page.cookie!);
    expect(refused.status).toBe(400);
    expect(refused.location).toBeNull();
    expect(refused.html).toContain('Too many sign-ins are pending; try again in a minute');
    // Another user still signs in meanwhile.
    expect(codeFrom(await signIn(api.url, codeParams(challenge), api.token))).toMatch(/^[0-9a-f]{40}$/);
    // Once they expire, the user may sign in again.
    clock.set(clock.now() + 61_000);
    expect(codeFrom(await signIn(api.url, codeParams(challenge), user))).toMatch(/^[0-9a-f]{40}$/);
    expect((await tokenRequest(api.url, { client_id: cm.id, code: codes[0]!, code_verifier: verifier })).body.error).toBe('invalid_grant');
  });
});
