import Fastify, { type FastifyInstance, type FastifyError } from 'fastify';
import type { Logger } from '../../lib/logger.js';
import { FulcrumError, isFulcrumError } from '../../lib/errors.js';
import { apiReasons, badRequest, errorJson, frameworkError, httpStatus, parserError, rawErrorResponse, requestTimeoutResponse, toApiError } from './errors.js';
import { RateLimiter, type RateVerdict } from './rate-limit.js';
import { isConsoleRequest } from './console.js';
import { isLoginPage } from './login.js';
import { defaultApiListenerLimits, limitListener, listenerServerOptions, type ListenerLimits } from '../../lib/listener-limits.js';
import type { CapRefusal } from '../../lib/conn-cap.js';

const SPEC_VERSION = '4.176.0';

export interface HttpServerOptions {
  bodyLimit?: number;
  /** PEM certificate (chain) and key: the API is then served over HTTPS only (docs/security/api.md). */
  tls?: { cert: string; key: string };
  /** Per-address limits here, per-token ones in the router; without one no limit is advertised. */
  limiter?: RateLimiter;
  /** Request and idle timeouts, connection caps (lib/listener-limits.ts); the defaults otherwise. */
  listener?: ListenerLimits;
  /** Told of every connection a cap closed at accept (for the metrics). */
  connectionRefused?: (cap: CapRefusal) => void;
}

/** The verdict of the limits a request was counted against, for the `X-RateLimit-*` headers. */
export function rateVerdict(req: object): RateVerdict | undefined {
  return (req as { fulcrumRate?: RateVerdict }).fulcrumRate;
}

/**
 * Builds the fastify instance with the real API's wire format: every response is exactly
 * `Content-Type: application/json` (linodego compares it string for string on errors), carries
 * the headers real responses carry, and every error is `{"errors":[{reason, field?}]}`.
 */
export function createHttpServer(logger: Logger, opts: HttpServerOptions = {}): FastifyInstance {
  const limiter = opts.limiter;
  const listener = opts.listener ?? defaultApiListenerLimits;
  const serverOptions = listenerServerOptions(listener);
  const app = Fastify({
    ...(opts.tls ? { https: { ...serverOptions, cert: opts.tls.cert, key: opts.tls.key } } : { http: serverOptions }),
    requestTimeout: listener.requestTimeoutMs,
    keepAliveTimeout: listener.idleTimeoutMs,
    connectionTimeout: listener.idleTimeoutMs,
    // Per-request logs only at debug: an API under a polling client would drown the rest.
    loggerInstance: logger.child({ component: 'api' }, { level: logger.level === 'debug' || logger.level === 'trace' ? logger.level : 'warn' }) as any,
    bodyLimit: opts.bodyLimit ?? 1024 * 1024,
    routerOptions: { maxParamLength: 500, ignoreTrailingSlash: true, ignoreDuplicateSlashes: true },
    return503OnClosing: false,
    // Errors of the HTTP parser itself (headers over Node's 16 KiB limit, broken request lines)
    // never reach a route: answer them in the API's error shape too, then close the connection.
    clientErrorHandler: (err: NodeJS.ErrnoException, socket) => {
      if (!socket.writable) return void socket.destroy();
      // Too slow (the request timeout): say so unless this connection has answered already (a 401
      // goes out before a trickling body is in; a second response would garble the stream), and
      // close at once rather than wait for a client that is not sending to close its side.
      if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
        if (socket.bytesWritten > 0) return void socket.destroy();
        return void socket.end(requestTimeoutResponse(), () => socket.destroy());
      }
      socket.end(rawErrorResponse(parserError(err.code)));
    },
    // Malformed URLs (bad percent-encoding) and the like fail before routing: same error shape.
    frameworkErrors: (err, _req, reply) => {
      const e = frameworkError(err.code);
      // A Buffer, because fastify appends "; charset=utf-8" to string payloads that skip onSend.
      (reply as any).code(httpStatus(e)).header('content-type', 'application/json').send(Buffer.from(errorJson(e)));
    },
  });

  limitListener(app.server, listener, opts.connectionRefused);

  // Clients send JSON with any or no content type (curl's default is form-encoded):
  // parse every body as JSON and answer a malformed one with a 400.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => {
    const text = String(body);
    if (text.trim() === '') return done(null, undefined);
    try {
      done(null, JSON.parse(text));
    } catch {
      done(badRequest(apiReasons.bodyNotJson), undefined);
    }
  });

  // Every request counts against its client address first, before the token is even read, so
  // guessing tokens or hammering public routes is limited too.
  if (limiter) {
    app.addHook('onRequest', async (req) => {
      const v = limiter.takeIp(req.socket.remoteAddress);
      (req as any).fulcrumRate = v;
      if (v && !v.allowed) throw RateLimiter.tooMany();
    });
  }

  app.addHook('onSend', async (req, reply, payload) => {
    // The console's pages and scripts carry their own types and policy (api/console.ts).
    if (isConsoleRequest(req) || isLoginPage(req)) return payload;
    const accepted = (req as any).fulcrumAccepted as string | undefined;
    const scopes = (req as any).fulcrumScopes as string | undefined;
    reply.headers({
      'content-type': 'application/json',
      'access-control-allow-credentials': 'true',
      'access-control-allow-headers': 'Authorization, Origin, X-Requested-With, Content-Type, Accept, X-Filter',
      'access-control-allow-methods': 'HEAD, GET, OPTIONS, POST, PUT, DELETE',
      'access-control-allow-origin': '*',
      'access-control-expose-headers': 'X-OAuth-Scopes, X-Accepted-OAuth-Scopes, X-Status',
      'cache-control': 'max-age=0, no-cache, no-store',
      'content-security-policy': "default-src 'none'",
      pragma: 'no-cache',
      'strict-transport-security': 'max-age=31536000',
      vary: 'Authorization, X-Filter',
      'x-accepted-oauth-scopes': accepted ?? '*',
      'x-oauth-scopes': scopes ?? 'unknown',
      'x-content-type-options': 'nosniff',
      'x-frame-options': 'DENY',
      'x-xss-protection': '1; mode=block',
      'x-spec-version': SPEC_VERSION,
    });
    const rate = rateVerdict(req);
    if (limiter && rate) reply.headers(limiter.headers(rate));
    return payload;
  });

  // CORS preflight: browsers (Cloud Manager, @linode/api-v4 in a web page) ask before every
  // authenticated call; the answer carries the CORS headers of the onSend hook and needs no token.
  for (const prefix of ['/v4', '/v4beta']) {
    app.route({ method: 'OPTIONS', url: `${prefix}/*`, handler: async (_req, reply) => reply.code(200).send('{}') });
  }

  app.setNotFoundHandler((_req, reply) => {
    const e = FulcrumError.notFound();
    reply.code(httpStatus(e)).send(errorJson(e));
  });

  app.setErrorHandler((err: FastifyError | FulcrumError | Error, req, reply) => {
    const e = toApiError(err);
    const status = httpStatus(e);
    if (status >= 500) req.log.error({ err }, isFulcrumError(err) ? 'internal error' : 'unhandled error');
    return reply.code(status).send(errorJson(e));
  });

  return app;
}
