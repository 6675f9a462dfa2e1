import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { ErrorCollector, FulcrumError } from '../../../lib/errors.js';
import type { Clock } from '../../../lib/clock.js';
import type { OAuthClientRecord, OAuthRepository } from '../../store/oauth-repository.js';
import type { Actor, AuthService } from './auth-service.js';
import { hasScope, normaliseScopes, parseRequired, validateScopes } from './scopes.js';

/** The error codes of RFC 6749 (4.1.2.1, 4.2.2.1, 5.2) the login answers with. */
export type OAuthErrorCode =
  | 'invalid_request' | 'invalid_client' | 'invalid_grant' | 'unauthorized_client' | 'unsupported_grant_type'
  | 'unsupported_response_type' | 'invalid_scope' | 'access_denied' | 'temporarily_unavailable';

/**
 * A refusal of the login. It is a FulcrumError like every other (a 401 for a client that failed
 * to authenticate, a 400 otherwise), and carries the RFC's own error code, which the login's
 * pages and its token endpoint answer with instead of the API's error shape. `redirect` is set
 * when the RFC says to tell the client through its redirect URI rather than show the person an
 * error page (the client and its redirect URI are known good).
 */
export class OAuthRefusal extends FulcrumError {
  constructor(readonly oauthError: OAuthErrorCode, description: string, readonly redirect?: string) {
    super(oauthError === 'invalid_client' ? 'invalid_token' : 'validation', description);
  }
}

/** How long an authorization code may be exchanged (RFC 6749 10.5: short; one minute). */
export const CODE_TTL_MS = 60_000;
/** How long a token issued through the login lives, as on the real service (two hours). */
export const TOKEN_TTL_MS = 2 * 3600_000;
/** Caps a hostile caller could otherwise grow without limit. */
export const MAX_CLIENTS = 100;
export const MAX_PENDING_CODES = 1_000;
/** One user's share of them: signing in again and again cannot lock the others out. */
export const MAX_PENDING_CODES_PER_USER = 20;
export const MAX_LOGIN_TOKENS_PER_USER = 100;
const MAX_PARAM = 2048;

/** An authorization request (GET /oauth/authorize) that passed every check. */
export interface AuthorizationRequest {
  client: OAuthClientRecord;
  responseType: 'code' | 'token';
  /** As the request gave it (the registered one when it gave none). */
  redirectUri: string;
  scopes: string;
  state: string | undefined;
  challenge: string | null;
}

export interface IssuedToken {
  access_token: string;
  token_type: 'bearer';
  expires_in: number;
  /** Cloud Manager reads `scopes`; RFC 6749 names it `scope`: both are sent. */
  scopes: string;
  scope: string;
}

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');
const s256 = (verifier: string) => createHash('sha256').update(verifier).digest('base64url');

/**
 * Whether a redirect URI given in a request matches the client's registered one. The
 * comparison is of strings, exactly, with two allowances: a query may follow (Cloud Manager adds
 * `?returnTo=...`; it is kept when redirecting, RFC 6749 3.1.2), and a registered loopback URI
 * without a port matches that URI on any port (RFC 8252 7.3: linode-cli listens on a port the
 * system picks). A fragment or user information is never accepted.
 */
export function redirectMatches(registered: string, given: string): boolean {
  if (given.includes('#') || /\s/.test(given)) return false;
  const q = given.indexOf('?');
  const base = q === -1 ? given : given.slice(0, q);
  if (base === registered) return true;
  const r = /^http:\/\/(localhost|127\.0\.0\.1|\[::1\])(\/[^?#]*)?$/.exec(registered);
  const g = /^http:\/\/([^/@:?#]+|\[::1\]):(\d{1,5})(\/[^?#]*)?$/.exec(base);
  if (!r || !g || g[1] !== r[1]) return false;
  const port = Number(g[2]);
  return port > 0 && port < 65536 && (g[3] ?? '/') === (r[2] ?? '/');
}

/** Appends parameters to a URI's query (or, for the implicit grant, as its fragment). */
function withParams(uri: string, params: Record<string, string | undefined>, fragment = false): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) p.set(k, v);
  if (fragment) return `${uri}#${p.toString()}`;
  return `${uri}${uri.includes('?') ? '&' : '?'}${p.toString()}`;
}

function secretMatches(hash: string, secret: unknown): boolean {
  if (typeof secret !== 'string' || hash === '') return false;
  return timingSafeEqual(Buffer.from(sha256(secret)), Buffer.from(hash));
}

/**
 * The OAuth 2 authorization server of the login root (docs/security/api.md, "OAuth login"):
 * clients an admin registers (/account/oauth-clients), the authorization code grant (PKCE S256
 * required of public clients), the implicit grant for the clients allowed it, revocation. A
 * person signs in by giving one of their API tokens; what is issued never exceeds that token's
 * scopes or expiry.
 */
export class OAuthService {
  constructor(
    private readonly repo: OAuthRepository,
    private readonly auth: AuthService,
    private readonly clock: Clock,
  ) {}

  // --- Clients (/account/oauth-clients), for unrestricted users -------------------------------

  async listClients(actor: Actor): Promise<OAuthClientRecord[]> {
    this.auth.requireUnrestricted(actor);
    return this.repo.clients();
  }

  async getClient(actor: Actor, id: string): Promise<OAuthClientRecord> {
    this.auth.requireUnrestricted(actor);
    const c = /^[0-9a-f]{20}$/.test(id) ? await this.repo.client(id) : undefined;
    if (!c) throw FulcrumError.notFound();
    return c;
  }

  async createClient(actor: Actor, body: Record<string, unknown>): Promise<{ client: OAuthClientRecord; secret: string }> {
    this.auth.requireUnrestricted(actor);
    const errs = new ErrorCollector();
    refuseUnknown(errs, body, ['label', 'redirect_uri', 'public']);
    const label = clientLabel(errs, body.label, true);
    const redirectUri = registeredRedirect(errs, body.redirect_uri, true);
    let isPublic = false;
    if (body.public !== undefined && body.public !== null) {
      if (typeof body.public !== 'boolean') errs.add('public', 'public must be a boolean');
      else isPublic = body.public;
    }
    errs.throwIfAny();
    const secret = isPublic ? '' : randomBytes(32).toString('hex');
    const client: OAuthClientRecord = {
      id: randomBytes(10).toString('hex'), label: label!, public: isPublic, redirectUri: redirectUri!,
      secretHash: isPublic ? '' : sha256(secret), implicit: false, created: this.clock.now(),
    };
    if (!(await this.repo.addClient(client, MAX_CLIENTS))) throw FulcrumError.conflict(`An account may have at most ${MAX_CLIENTS} OAuth clients`);
    return { client, secret };
  }

  async updateClient(actor: Actor, id: string, body: Record<string, unknown>): Promise<OAuthClientRecord> {
    const c = await this.getClient(actor, id);
    const errs = new ErrorCollector();
    refuseUnknown(errs, body, ['label', 'redirect_uri']);
    const label = clientLabel(errs, body.label, false);
    const redirectUri = registeredRedirect(errs, body.redirect_uri, false);
    errs.throwIfAny();
    await this.repo.updateClient(c.id, { label, redirectUri });
    return (await this.repo.client(c.id))!;
  }

  async deleteClient(actor: Actor, id: string): Promise<void> {
    const c = await this.getClient(actor, id);
    await this.repo.deleteClient(c.id);
  }

  async resetSecret(actor: Actor, id: string): Promise<{ client: OAuthClientRecord; secret: string }> {
    const c = await this.getClient(actor, id);
    if (c.public) throw FulcrumError.conflict('A public client has no secret');
    const secret = randomBytes(32).toString('hex');
    await this.repo.updateClient(c.id, { secretHash: sha256(secret) });
    return { client: (await this.repo.client(c.id))!, secret };
  }

  // --- The login: authorize, token, revoke ---------------------------------------------------

  /**
   * Checks an authorization request. An unknown client or a redirect URI that is not the
   * client's is refused without redirecting (RFC 6749 4.1.2.1: the person is shown the error);
   * any other fault is sent to the client through its redirect URI.
   */
  async authorizationRequest(params: Record<string, unknown>): Promise<AuthorizationRequest> {
    const one = (name: string): string | undefined => {
      const v = params[name];
      if (v === undefined) return undefined;
      if (typeof v !== 'string') throw new OAuthRefusal('invalid_request', `${name} must be given once`);
      if (v.length > MAX_PARAM) throw new OAuthRefusal('invalid_request', `${name} is too long`);
      return v;
    };
    const clientId = one('client_id');
    if (!clientId) throw new OAuthRefusal('invalid_request', 'client_id is required');
    const client = /^[0-9a-f]{20}$/.test(clientId) ? await this.repo.client(clientId) : undefined;
    if (!client) throw new OAuthRefusal('invalid_client', 'There is no OAuth client with that client_id');
    const given = one('redirect_uri');
    if (given !== undefined && !redirectMatches(client.redirectUri, given)) {
      throw new OAuthRefusal('invalid_request', 'redirect_uri is not the redirect URI registered for this client');
    }
    const redirectUri = given ?? client.redirectUri;
    const state = one('state');
    const responseType = one('response_type');
    const refuse = (code: OAuthErrorCode, description: string, fragment: boolean) =>
      new OAuthRefusal(code, description, withParams(redirectUri, { error: code, error_description: description, state }, fragment));
    if (responseType !== 'code' && responseType !== 'token') throw refuse('unsupported_response_type', 'response_type must be code or token', false);
    const implicit = responseType === 'token';
    if (implicit && !client.implicit) throw refuse('unauthorized_client', 'This client may not use the implicit grant (response_type=token)', true);
    // linode-cli names the parameter `scopes`, Cloud Manager and RFC 6749 `scope`.
    const requested = one('scope') ?? one('scopes') ?? '*';
    const scopeError = validateScopes(requested);
    if (scopeError) throw refuse('invalid_scope', scopeError, implicit);
    let challenge: string | null = null;
    if (!implicit) {
      const c = one('code_challenge');
      const method = one('code_challenge_method');
      if (c !== undefined || method !== undefined) {
        if (method !== 'S256') throw refuse('invalid_request', 'code_challenge_method must be S256', false);
        if (c === undefined || !/^[A-Za-z0-9_-]{43}$/.test(c)) throw refuse('invalid_request', 'code_challenge must be the base64url SHA-256 of the verifier (43 characters)', false);
        challenge = c;
      } else if (client.public) {
        throw refuse('invalid_request', 'A public client must send a PKCE code_challenge with code_challenge_method S256', false);
      }
    }
    return { client, responseType, redirectUri, scopes: normaliseScopes(requested), state, challenge };
  }

  /**
   * The person signed in with `credential` (one of their API tokens) and approved `req`: returns
   * where to send the browser, with a code or (implicit grant) a token. A bad credential or
   * scopes beyond it are refused without redirecting, so the person may try again.
   */
  async approve(req: AuthorizationRequest, credential: string): Promise<string> {
    let actor: Actor;
    try {
      actor = await this.auth.authenticate(`Bearer ${credential.trim()}`);
    } catch {
      throw new OAuthRefusal('access_denied', 'That token is not valid');
    }
    const scopes = narrowScopes(req.scopes, actor.scopes);
    const now = this.clock.now();
    const fragment = req.responseType === 'token';
    if (req.responseType === 'token') {
      const t = await this.issue(actor.user.id, req.client, scopes, actor.token.expiry, null);
      return withParams(req.redirectUri, { access_token: t.access_token, token_type: t.token_type, expires_in: String(t.expires_in), scopes: t.scopes, state: req.state }, fragment);
    }
    const code = randomBytes(20).toString('hex');
    const stored = await this.repo.addCode({
      codeHash: sha256(code), clientId: req.client.id, userId: actor.user.id, redirectUri: req.redirectUri, scopes, challenge: req.challenge,
      expires: now + CODE_TTL_MS, tokenExpiry: actor.token.expiry, usedAt: null, tokenId: null,
    }, now, { total: MAX_PENDING_CODES, perUser: MAX_PENDING_CODES_PER_USER });
    if (!stored) throw new OAuthRefusal('temporarily_unavailable', 'Too many sign-ins are pending; try again in a minute');
    return withParams(req.redirectUri, { code, state: req.state });
  }

  /**
   * POST /oauth/token with grant_type authorization_code (the default: the real service's
   * documented private flow sends none). `basic` is the client's HTTP Basic credentials, if sent.
   */
  async exchange(form: Record<string, string>, basic?: { id: string; secret: string }): Promise<IssuedToken> {
    const grantType = form.grant_type ?? 'authorization_code';
    if (grantType !== 'authorization_code') throw new OAuthRefusal('unsupported_grant_type', 'grant_type must be authorization_code');
    const client = await this.authenticateClient(form, basic);
    const code = form.code;
    if (!code) throw new OAuthRefusal('invalid_request', 'code is required');
    const now = this.clock.now();
    const hash = sha256(code);
    const rec = await this.repo.useCode(hash, now);
    if (!rec) throw new OAuthRefusal('invalid_grant', 'The code is not valid');
    if (rec.usedAt !== null) {
      // A code presented twice has leaked: the token it was exchanged for goes too (RFC 6749 4.1.2).
      if (rec.tokenId !== null) await this.auth.revokeTokenId(rec.tokenId);
      throw new OAuthRefusal('invalid_grant', 'The code has been used already');
    }
    if (rec.clientId !== client.id) throw new OAuthRefusal('invalid_grant', 'The code was not issued to this client');
    if (rec.expires <= now) throw new OAuthRefusal('invalid_grant', 'The code has expired');
    if (form.redirect_uri !== undefined && form.redirect_uri !== rec.redirectUri) throw new OAuthRefusal('invalid_grant', 'redirect_uri is not the one of the authorization request');
    const verifier = form.code_verifier;
    if (rec.challenge !== null) {
      if (verifier === undefined) throw new OAuthRefusal('invalid_grant', 'code_verifier is required');
      if (!/^[A-Za-z0-9._~-]{43,128}$/.test(verifier) || s256(verifier) !== rec.challenge) throw new OAuthRefusal('invalid_grant', 'code_verifier does not match the code_challenge');
    } else if (verifier !== undefined) {
      throw new OAuthRefusal('invalid_grant', 'code_verifier was sent but the authorization request had no code_challenge');
    }
    return this.issue(rec.userId, client, rec.scopes, rec.tokenExpiry, hash);
  }

  /** POST /oauth/revoke (RFC 7009): a token this client was issued is revoked; any other is left alone, and the answer is the same. */
  async revoke(form: Record<string, string>, basic?: { id: string; secret: string }): Promise<void> {
    const client = await this.authenticateClient(form, basic);
    if (!form.token) throw new OAuthRefusal('invalid_request', 'token is required');
    let actor: Actor;
    try {
      actor = await this.auth.authenticate(`Bearer ${form.token}`);
    } catch {
      return;
    }
    if ((await this.repo.tokenClient(actor.token.id)) === client.id) await this.auth.revokeTokenId(actor.token.id);
  }

  private async authenticateClient(form: Record<string, string>, basic?: { id: string; secret: string }): Promise<OAuthClientRecord> {
    const id = basic?.id ?? form.client_id;
    if (!id) throw new OAuthRefusal('invalid_client', 'client_id is required');
    if (basic && form.client_id !== undefined && form.client_id !== basic.id) throw new OAuthRefusal('invalid_client', 'client_id differs from the Basic credentials');
    const client = /^[0-9a-f]{20}$/.test(id) ? await this.repo.client(id) : undefined;
    if (!client) throw new OAuthRefusal('invalid_client', 'There is no OAuth client with that client_id');
    if (!client.public && !secretMatches(client.secretHash, basic?.secret ?? form.client_secret)) {
      throw new OAuthRefusal('invalid_client', 'The client secret is missing or wrong');
    }
    return client;
  }

  private async issue(userId: number, client: OAuthClientRecord, scopes: string, notAfter: number | null, codeHash: string | null): Promise<IssuedToken> {
    const now = this.clock.now();
    if ((await this.repo.liveTokens(userId, now)) >= MAX_LOGIN_TOKENS_PER_USER) {
      throw new OAuthRefusal('access_denied', `At most ${MAX_LOGIN_TOKENS_PER_USER} tokens issued by the login may be live at once; revoke some`);
    }
    const expiry = notAfter === null ? now + TOKEN_TTL_MS : Math.min(now + TOKEN_TTL_MS, notAfter);
    const { record, secret } = await this.auth.issueToken(userId, { label: `${client.label} (OAuth)`.slice(0, 100), scopes, expiry });
    await this.repo.linkToken(codeHash, client.id, record.id);
    return { access_token: secret, token_type: 'bearer', expires_in: Math.max(0, Math.floor((expiry - now) / 1000)), scopes: record.scopes, scope: record.scopes };
  }
}

/** The requested scopes, within what the signing-in token may do (`*` asks for all of that). */
function narrowScopes(requested: string, held: string): string {
  if (requested === '*') return held;
  if (held === '*') return requested;
  const beyond = requested.split(' ').filter((p) => !hasScope(held, parseRequired(p)));
  if (beyond.length > 0) throw new OAuthRefusal('invalid_scope', `The token you signed in with does not allow ${beyond.join(' ')}`);
  return requested;
}

function refuseUnknown(errs: ErrorCollector, body: Record<string, unknown>, known: string[]): void {
  for (const k of Object.keys(body)) if (!known.includes(k)) errs.add(k, `${k} is not a field of an OAuth client`);
}

function clientLabel(errs: ErrorCollector, v: unknown, required: boolean): string | undefined {
  if (v === undefined || v === null) {
    if (required) errs.add('label', 'label is required');
    return undefined;
  }
  if (typeof v !== 'string' || v.length < 1 || v.length > 512) errs.add('label', 'Length must be 1-512 characters');
  else return v;
  return undefined;
}

/**
 * A redirect URI as registered: an absolute http(s) URL of at most 512 characters, without
 * user information, query or fragment (it is compared exactly: redirectMatches).
 */
function registeredRedirect(errs: ErrorCollector, v: unknown, required: boolean): string | undefined {
  if (v === undefined || v === null) {
    if (required) errs.add('redirect_uri', 'redirect_uri is required');
    return undefined;
  }
  let u: URL | undefined;
  try {
    u = typeof v === 'string' ? new URL(v) : undefined;
  } catch {
    u = undefined;
  }
  const s = v as string;
  if (!u || s.length > 512 || /[\s#?]/.test(s) || (u.protocol !== 'https:' && u.protocol !== 'http:') || u.username !== '' || u.password !== '' || !/^https?:\/\//.test(s)) {
    errs.add('redirect_uri', 'redirect_uri must be an http or https URL without a query or fragment');
    return undefined;
  }
  return s;
}
