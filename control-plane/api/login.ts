import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { OAuthRefusal, type AuthorizationRequest, type OAuthService } from '../domain/auth/oauth-service.js';

/**
 * The login root of the install (`/login`, what Cloud Manager calls REACT_APP_LOGIN_ROOT and the
 * real service serves as login.linode.com): the sign-in page of the OAuth 2 authorization server,
 * `/oauth/token`, `/oauth/revoke` and `/logout` (docs/security/api.md, "OAuth login"). Only
 * translates HTTP to OAuthService and back.
 */
export const LOGIN_ROOT = '/login';

const CSRF_COOKIE = 'fulcrum_login_csrf';
/** Form bodies of the login are small; anything larger is not one. */
const BODY_LIMIT = 64 * 1024;
/** The authorization request's parameters the sign-in form carries over to its POST. */
const CARRIED = ['client_id', 'redirect_uri', 'response_type', 'scope', 'scopes', 'state', 'code_challenge', 'code_challenge_method'] as const;

/** Marks a response whose headers the login sets itself (the API's JSON header hook leaves it alone). */
export function isLoginPage(req: FastifyRequest): boolean {
  return (req as { fulcrumLoginPage?: boolean }).fulcrumLoginPage === true;
}

const escape = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** Form fields: every value a string given once; anything else is a malformed request. */
type Form = Record<string, string>;

async function readForm(req: FastifyRequest): Promise<Form> {
  const body = req.body as Buffer | undefined;
  const header = String(req.headers['content-type'] ?? '');
  // The boundary of a multipart type is case-sensitive (browsers mix cases): only the type is lowered.
  const type = header.toLowerCase();
  const out: Form = {};
  const add = (k: string, v: unknown) => {
    if (typeof v !== 'string') throw new OAuthRefusal('invalid_request', `${k} must be a text field`);
    if (Object.hasOwn(out, k)) throw new OAuthRefusal('invalid_request', `${k} must be given once`);
    out[k] = v;
  };
  if (!body || body.length === 0) return out;
  if (type.startsWith('application/x-www-form-urlencoded')) {
    for (const [k, v] of new URLSearchParams(body.toString('utf8'))) add(k, v);
  } else if (type.startsWith('multipart/form-data')) {
    let data: FormData;
    try {
      data = await new Response(new Uint8Array(body), { headers: { 'content-type': header } }).formData();
    } catch {
      throw new OAuthRefusal('invalid_request', 'The multipart body is malformed');
    }
    for (const [k, v] of data) add(k, v);
  } else {
    throw new OAuthRefusal('invalid_request', 'The body must be application/x-www-form-urlencoded or multipart/form-data');
  }
  return out;
}

/** HTTP Basic client credentials (RFC 6749 2.3.1), when sent. */
function basicAuth(req: FastifyRequest): { id: string; secret: string } | undefined {
  const m = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(req.headers.authorization ?? '');
  if (!m) return undefined;
  const text = Buffer.from(m[1]!, 'base64').toString('utf8');
  const i = text.indexOf(':');
  if (i < 0) return undefined;
  const dec = (s: string) => {
    try {
      return decodeURIComponent(s.replace(/\+/g, ' '));
    } catch {
      return s;
    }
  };
  return { id: dec(text.slice(0, i)), secret: dec(text.slice(i + 1)) };
}

function cookie(req: FastifyRequest, name: string): string | undefined {
  for (const part of String(req.headers.cookie ?? '').split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === name) return v.join('=');
  }
  return undefined;
}

function sameSecret(a: string | undefined, b: string | undefined): boolean {
  if (!a || !b || a.length !== b.length) return false;
  return timingSafeEqual(Buffer.from(a), Buffer.from(b));
}

export function loginRoutes(app: FastifyInstance, d: { oauth: OAuthService; secure: boolean }): void {
  const page = (req: FastifyRequest, reply: FastifyReply, status: number, title: string, body: string) => {
    (req as { fulcrumLoginPage?: boolean }).fulcrumLoginPage = true;
    const nonce = randomBytes(16).toString('base64');
    // No script at all; the one style block by nonce. No form-action: after the sign-in the
    // browser is redirected to the client's own origin, which form-action would block.
    const csp = `default-src 'none'; style-src 'nonce-${nonce}'; base-uri 'none'; frame-ancestors 'none'`;
    const html = `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escape(title)} - Fulcrum</title><style nonce="${nonce}">body{font-family:system-ui,sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem;color:#1a1a1a}
label{display:block;margin:1rem 0 .25rem;font-weight:600}input[type=password]{width:100%;padding:.5rem;font-size:1rem;box-sizing:border-box}
button{margin-top:1rem;padding:.5rem 1.25rem;font-size:1rem}.error{color:#a00000;font-weight:600}code{word-break:break-all}</style></head>
<body><main><h1>${escape(title)}</h1>${body}</main></body></html>`;
    return reply.code(status).headers({
      'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store', pragma: 'no-cache', 'content-security-policy': csp,
      'x-content-type-options': 'nosniff', 'x-frame-options': 'DENY', 'referrer-policy': 'no-referrer',
    }).send(html);
  };
  const redirect = (req: FastifyRequest, reply: FastifyReply, to: string) => {
    (req as { fulcrumLoginPage?: boolean }).fulcrumLoginPage = true;
    return reply.code(303).headers({ location: to, 'cache-control': 'no-store', 'referrer-policy': 'no-referrer', 'content-type': 'text/plain; charset=utf-8' }).send('');
  };
  const csrfCookie = (value: string, maxAge: number) =>
    `${CSRF_COOKIE}=${value}; Path=${LOGIN_ROOT}; HttpOnly; SameSite=Strict; Max-Age=${maxAge}${d.secure ? '; Secure' : ''}`;

  /** The sign-in form for a checked request, with a CSRF token bound to a cookie (double submit). */
  const signIn = (req: FastifyRequest, reply: FastifyReply, params: Record<string, unknown>, ar: AuthorizationRequest, error?: string) => {
    const existing = cookie(req, CSRF_COOKIE);
    const csrf = existing && /^[0-9a-f]{64}$/.test(existing) ? existing : randomBytes(32).toString('hex');
    reply.header('set-cookie', csrfCookie(csrf, 1800));
    const hidden = CARRIED.filter((k) => typeof params[k] === 'string')
      .map((k) => `<input type="hidden" name="${k}" value="${escape(params[k] as string)}">`).join('');
    const what = ar.responseType === 'token' ? 'a token' : 'an authorization code';
    return page(req, reply, error ? 400 : 200, 'Sign in', `
<p><strong>${escape(ar.client.label)}</strong> asks for access to this Fulcrum install with the scopes <code>${escape(ar.scopes)}</code>.
It will receive ${what} at <code>${escape(ar.redirectUri.split('?')[0]!)}</code>.</p>
${error ? `<p class="error" role="alert">${escape(error)}</p>` : ''}
<form method="post" action="authorize" autocomplete="off">${hidden}<input type="hidden" name="csrf_token" value="${csrf}">
<label for="token">Your API token</label><input id="token" name="token" type="password" required autocomplete="off" spellcheck="false">
<p>What is issued never has more scopes than this token, and lasts at most two hours.</p>
<button type="submit">Sign in and allow</button></form>`);
  };
  const refusalPage = (req: FastifyRequest, reply: FastifyReply, e: OAuthRefusal, status = 400) =>
    page(req, reply, status, 'Sign-in refused', `<p class="error" role="alert">${escape(e.errors[0]?.reason ?? e.oauthError)}</p><p>Error: <code>${e.oauthError}</code></p>`);

  const oauthJson = (reply: FastifyReply, e: OAuthRefusal, basic: boolean) => {
    if (e.oauthError === 'invalid_client' && basic) reply.header('www-authenticate', 'Basic realm="fulcrum"');
    return reply.code(e.oauthError === 'invalid_client' ? 401 : 400).send(JSON.stringify({ error: e.oauthError, error_description: e.errors[0]?.reason ?? '' }));
  };

  void app.register(async (login) => {
    // Forms here, not JSON: the body is kept as bytes and read by readForm.
    login.removeAllContentTypeParsers();
    login.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: BODY_LIMIT }, (_req, body, done) => done(null, body));

    login.get('/oauth/authorize', async (req, reply) => {
      const params = req.query as Record<string, unknown>;
      try {
        return signIn(req, reply, params, await d.oauth.authorizationRequest(params));
      } catch (e) {
        if (!(e instanceof OAuthRefusal)) throw e;
        return e.redirect ? redirect(req, reply, e.redirect) : refusalPage(req, reply, e);
      }
    });

    login.post('/oauth/authorize', async (req, reply) => {
      let form: Form;
      try {
        form = await readForm(req);
      } catch (e) {
        if (e instanceof OAuthRefusal) return refusalPage(req, reply, e);
        throw e;
      }
      // A form posted from another site carries no cookie (SameSite=Strict) or not this one.
      if (!sameSecret(cookie(req, CSRF_COOKIE), form.csrf_token)) {
        return refusalPage(req, reply, new OAuthRefusal('access_denied', 'The sign-in form expired or did not come from this page; open the sign-in link again'), 403);
      }
      let ar: AuthorizationRequest;
      try {
        ar = await d.oauth.authorizationRequest(form);
      } catch (e) {
        if (!(e instanceof OAuthRefusal)) throw e;
        return e.redirect ? redirect(req, reply, e.redirect) : refusalPage(req, reply, e);
      }
      try {
        return redirect(req, reply, await d.oauth.approve(ar, form.token ?? ''));
      } catch (e) {
        if (!(e instanceof OAuthRefusal)) throw e;
        return signIn(req, reply, form, ar, e.errors[0]?.reason);
      }
    });

    // JSON answers (RFC 6749 5.1, 5.2) with the API's headers: CORS for Cloud Manager's fetch.
    login.post('/oauth/token', async (req, reply) => {
      const basic = basicAuth(req);
      try {
        const form = await readForm(req);
        return reply.code(200).send(JSON.stringify(await d.oauth.exchange(form, basic)));
      } catch (e) {
        if (e instanceof OAuthRefusal) return oauthJson(reply, e, basic !== undefined);
        throw e;
      }
    });

    login.post('/oauth/revoke', async (req, reply) => {
      const basic = basicAuth(req);
      try {
        await d.oauth.revoke(await readForm(req), basic);
        return reply.code(200).send('{}');
      } catch (e) {
        if (e instanceof OAuthRefusal) return oauthJson(reply, e, basic !== undefined);
        throw e;
      }
    });
    login.route({ method: 'OPTIONS', url: '/oauth/*', handler: async (_req, reply) => reply.code(200).send('{}') });

    // Nothing of the sign-in is kept between requests but the CSRF cookie; signing out drops it.
    login.get('/logout', async (req, reply) => {
      reply.header('set-cookie', csrfCookie('', 0));
      return page(req, reply, 200, 'Signed out', '<p>You are signed out of this Fulcrum install. Tokens an application was given stay valid until they expire or the application revokes them.</p>');
    });
  }, { prefix: LOGIN_ROOT });
}
