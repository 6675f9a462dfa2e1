import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { FulcrumError } from '../../lib/errors.js';
import type { Actor, AuthService } from '../domain/auth/auth-service.js';
import { hasScope, parseRequired } from '../domain/auth/scopes.js';
import { apiReasons, badRequest } from './errors.js';
import { RateLimiter, tighter, type RateTier } from './rate-limit.js';
import { rateVerdict } from './server.js';

export interface RequestContext {
  /** Undefined only on public routes called without a token. */
  actor: Actor | undefined;
  params: Record<string, string>;
  query: Record<string, unknown>;
  body: Record<string, unknown>;
  headers: Record<string, string | string[] | undefined>;
}

/** Returned by a handler to answer 204 with no body (GET /profile/grants of an unrestricted user). */
export const NO_CONTENT = Symbol('no-content');

/** A route returns the JSON body to send with 200 (or NO_CONTENT). */
export type Handler = (ctx: RequestContext & { actor: Actor }) => Promise<unknown> | unknown;
export type PublicHandler = (ctx: RequestContext) => Promise<unknown> | unknown;

/**
 * Registers routes on both /v4 and /v4beta (identical behaviour, as on the real service),
 * authenticates, counts the call against the token's rate limit, checks the token's scope, and
 * stores the caller for the header hook. Routes under `/fulcrum/` (data planes, agents, tokens
 * for others) are for unrestricted users only. Handlers stay thin: parse, call one domain
 * service, return the wire object.
 */
export class Router {
  constructor(
    private readonly app: FastifyInstance,
    private readonly auth: AuthService,
    private readonly limiter?: RateLimiter,
  ) {}

  get(path: string, scope: string, h: Handler): void { this.add('GET', path, scope, h); }
  post(path: string, scope: string, h: Handler): void { this.add('POST', path, scope, h); }
  put(path: string, scope: string, h: Handler): void { this.add('PUT', path, scope, h); }
  delete(path: string, scope: string, h: Handler): void { this.add('DELETE', path, scope, h); }

  /** A route any valid token may call, whatever its scopes (e.g. /profile/grants). */
  getAuthenticated(path: string, h: Handler): void {
    this.register('GET', path, '*', (req) => this.authenticate(req, path), async (req, actor) => h({ ...this.context(req, actor), actor: actor! }));
  }

  /** A route anyone may call; a token, when sent, must still be valid. */
  publicGet(path: string, h: PublicHandler): void {
    this.register('GET', path, '*', (req) => (req.headers.authorization ? this.authenticate(req, path) : undefined), async (req, actor) =>
      h(this.context(req, actor)),
    );
  }

  private add(method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, scope: string, h: Handler): void {
    const required = parseRequired(scope);
    // Fulcrum's own endpoints name data planes, agents and other users: admins only, refused
    // the way the account's admin-only endpoints refuse a restricted user (docs/security/api.md).
    const adminOnly = path.startsWith('/fulcrum/');
    const guard = async (req: FastifyRequest): Promise<Actor> => {
      const actor = await this.authenticate(req, path);
      if (!hasScope(actor.scopes, required)) {
        throw new FulcrumError('scope_missing', apiReasons.scopeMissing);
      }
      if (adminOnly) this.auth.requireUnrestricted(actor);
      return actor;
    };
    this.register(method, path, scope, guard, async (req, actor) => h({ ...this.context(req, actor), actor: actor! }));
  }

  private async authenticate(req: FastifyRequest, path: string): Promise<Actor> {
    const actor = await this.auth.authenticate(req.headers.authorization);
    (req as any).fulcrumScopes = actor.scopes;
    if (this.limiter) {
      // Stats have their own, smaller per-token limit, as on the real service (docs/api.md).
      const tier: RateTier = path.endsWith('/stats') ? 'stats' : 'general';
      const v = this.limiter.takeToken(actor.token.id, tier);
      (req as any).fulcrumRate = tighter(rateVerdict(req), v);
      if (v && !v.allowed) throw RateLimiter.tooMany();
    }
    return actor;
  }

  private context(req: FastifyRequest, actor: Actor | undefined): RequestContext {
    const body = req.body;
    if (body !== undefined && body !== null && (typeof body !== 'object' || Array.isArray(body))) {
      throw badRequest(apiReasons.bodyNotObject);
    }
    return {
      actor,
      params: req.params as Record<string, string>,
      query: req.query as Record<string, unknown>,
      body: (body ?? {}) as Record<string, unknown>,
      headers: req.headers,
    };
  }

  /**
   * Authentication and the scope check run in onRequest, before the body is read or parsed, so
   * a request without a valid token or scope is a 401 whatever its body (even malformed JSON).
   */
  private register(
    method: string,
    path: string,
    scope: string,
    guard: (req: FastifyRequest) => Promise<Actor | undefined> | undefined,
    run: (req: FastifyRequest, actor: Actor | undefined) => Promise<unknown>,
  ): void {
    for (const prefix of ['/v4', '/v4beta']) {
      this.app.route({
        method: method as any,
        url: prefix + path,
        onRequest: async (req: FastifyRequest) => {
          (req as any).fulcrumAccepted = scope;
          (req as any).fulcrumActor = await guard(req);
        },
        handler: async (req: FastifyRequest, reply: FastifyReply) => {
          const out = await run(req, (req as any).fulcrumActor as Actor | undefined);
          if (out === NO_CONTENT) return reply.code(204).send();
          return reply.code(200).send(JSON.stringify(out ?? {}));
        },
      });
    }
  }
}

/** Parses an id path parameter; anything but a positive integer is simply not found. */
export function idParam(params: Record<string, string>, name: string): number {
  const raw = params[name] ?? '';
  if (!/^[1-9]\d{0,15}$/.test(raw)) throw FulcrumError.notFound();
  return Number(raw);
}
