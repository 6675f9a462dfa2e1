import { createHash, randomBytes } from 'node:crypto';
import { FulcrumError, ErrorCollector } from '../../../lib/errors.js';
import type { Clock } from '../../../lib/clock.js';
import { parseWireTime } from '../../../lib/clock.js';
import type { TokenRepository, UserRepository } from '../../store/ports.js';
import type { Grants, TokenRecord, User } from './model.js';
import { hasScope, normaliseScopes, parseRequired, validateScopes } from './scopes.js';
import { UniqueViolation } from '../../store/unique-violation.js';

/**
 * The username's 400 when the store's unique constraint refused it: two replicas can both find a
 * name free and insert it at once, and only the constraint decides (docs/architecture.md, "The store").
 */
export async function usernameUnique<T>(write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (err) {
    if (err instanceof UniqueViolation && err.field === 'username') throw FulcrumError.field('username', 'Username is taken');
    throw err;
  }
}

/** Who is calling: the user behind the token and what the token may do. */
export interface Actor {
  user: User;
  token: TokenRecord;
  scopes: string;
}

function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

export type EntityKind = 'nodebalancer' | 'database';

/**
 * Tokens (stored only as SHA-256 hashes) and the grants of restricted users.
 * Unrestricted users may do anything their token's scopes allow; restricted users additionally
 * need a global grant to create (add_nodebalancers, add_databases) and a per-entity grant to
 * read or change an entity.
 */
export class AuthService {
  constructor(
    private readonly users: UserRepository,
    private readonly tokens: TokenRepository,
    private readonly clock: Clock,
  ) {}

  async authenticate(authorization: string | undefined): Promise<Actor> {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
    if (!m) throw new FulcrumError('invalid_token', 'Invalid Token');
    const token = await this.tokens.byHash(hashToken(m[1]!));
    if (!token || (token.expiry !== null && token.expiry <= this.clock.now())) throw new FulcrumError('invalid_token', 'Invalid Token');
    const user = await this.users.get(token.userId);
    if (!user) throw new FulcrumError('invalid_token', 'Invalid Token');
    return { user, token, scopes: token.scopes };
  }

  async ensureAdmin(username = 'admin'): Promise<User> {
    const found = await this.users.byUsername(username);
    if (found) return found;
    try {
      return await this.users.create({ username, email: `${username}@localhost`, restricted: false, grants: { global: {}, nodebalancer: {}, database: {} } });
    } catch (err) {
      // Replicas starting together on an empty store: another one made it first.
      const made = err instanceof UniqueViolation ? await this.users.byUsername(username) : undefined;
      if (made) return made;
      throw err;
    }
  }

  createUser(username: string, restricted: boolean, grants: Grants, email = `${username}@localhost`): Promise<User> {
    return usernameUnique(() => this.users.create({ username, email, restricted, grants }));
  }

  /** Issues a token; the secret is returned once and only its hash is stored. */
  async issueToken(userId: number, input: { label: string; scopes: string; expiry: number | null }): Promise<{ record: TokenRecord; secret: string }> {
    const secret = randomBytes(32).toString('hex');
    const record = await this.tokens.create({
      userId,
      label: input.label,
      scopes: normaliseScopes(input.scopes),
      tokenHash: hashToken(secret),
      tokenPrefix: secret.slice(0, 16),
      created: Math.floor(this.clock.now() / 1000) * 1000,
      expiry: input.expiry,
    });
    return { record, secret };
  }

  /**
   * Validates a POST /profile/tokens body and issues the token for the caller's user. As the spec
   * says, scopes omitted or `*` mean "the same scopes as the acting token", and a token may not
   * get scopes beyond those of the token that creates it.
   */
  createTokenFromRequest(actor: Actor, body: Record<string, unknown>, forUser: User = actor.user): Promise<{ record: TokenRecord; secret: string }> {
    const errs = new ErrorCollector();
    let label = 'Personal Access Token';
    if (body.label !== undefined && body.label !== null) {
      if (typeof body.label !== 'string') errs.add('label', 'label must be a string');
      else if (body.label.length < 1 || body.label.length > 100) errs.add('label', 'Length must be 1-100 characters');
      else label = body.label;
    }
    let scopes = actor.scopes;
    if (body.scopes !== undefined && body.scopes !== null) {
      if (typeof body.scopes !== 'string') errs.add('scopes', 'scopes must be a string');
      else {
        const e = validateScopes(body.scopes);
        if (e) errs.add('scopes', e);
        else if (normaliseScopes(body.scopes) !== '*') {
          const beyond = normaliseScopes(body.scopes).split(' ').filter((p) => !hasScope(actor.scopes, parseRequired(p)));
          if (beyond.length > 0) errs.add('scopes', `Scopes may not exceed those of the acting token: ${beyond.join(' ')}`);
          else scopes = body.scopes;
        }
      }
    }
    let expiry: number | null = null;
    if (body.expiry !== undefined && body.expiry !== null) {
      const t = typeof body.expiry === 'string' ? parseWireTime(body.expiry.replace(/Z$/, '').slice(0, 19)) : Number.NaN;
      if (Number.isNaN(t)) errs.add('expiry', 'expiry must be a datetime like 2030-01-01T00:00:00');
      else if (t <= this.clock.now()) errs.add('expiry', 'expiry must be in the future');
      else expiry = t;
    }
    errs.throwIfAny();
    return this.issueToken(forUser.id, { label, scopes, expiry });
  }

  listTokens(actor: Actor): Promise<TokenRecord[]> {
    return this.tokens.listByUser(actor.user.id);
  }

  async getToken(actor: Actor, id: number): Promise<TokenRecord> {
    const t = await this.tokens.get(id);
    if (!t || t.userId !== actor.user.id) throw FulcrumError.notFound();
    return t;
  }

  async updateToken(actor: Actor, id: number, body: Record<string, unknown>): Promise<TokenRecord> {
    const t = await this.getToken(actor, id);
    if (body.label !== undefined && body.label !== null) {
      if (typeof body.label !== 'string' || body.label.length < 1 || body.label.length > 100) throw FulcrumError.field('label', 'Length must be 1-100 characters');
      await this.tokens.update(id, { label: body.label });
    }
    return (await this.tokens.get(t.id))!;
  }

  async revokeToken(actor: Actor, id: number): Promise<void> {
    await this.getToken(actor, id);
    await this.tokens.delete(id);
  }

  /** Revokes a token by id, whoever holds it (the OAuth login's revocation and code-replay rules). */
  async revokeTokenId(id: number): Promise<void> {
    await this.tokens.delete(id);
  }

  /** 403 unless the user may create entities of this kind. */
  requireAddGrant(actor: Actor, kind: EntityKind): void {
    if (!actor.user.restricted) return;
    const grant = kind === 'nodebalancer' ? 'add_nodebalancers' : 'add_databases';
    if (!actor.user.grants.global[grant]) throw new FulcrumError('forbidden', 'Unauthorized');
  }

  /** Whether the user can see the entity at all (restricted users see only granted ones). */
  canRead(actor: Actor, kind: EntityKind, id: number): boolean {
    if (!actor.user.restricted) return true;
    return actor.user.grants[kind][String(id)] !== undefined;
  }

  /**
   * 403 `Unauthorized` when a restricted user has no grant on the entity, or only read_only and
   * wants to change it. (Lists simply leave ungranted entities out.)
   */
  requireAccess(actor: Actor, kind: EntityKind, id: number, access: 'read_only' | 'read_write'): void {
    if (!actor.user.restricted) return;
    const g = actor.user.grants[kind][String(id)];
    if (g === undefined) throw new FulcrumError('forbidden', 'Unauthorized');
    if (access === 'read_write' && g !== 'read_write') throw new FulcrumError('forbidden', 'Unauthorized');
  }

  /**
   * A restricted user who creates an entity gets read_write on it, as on the real service. Only
   * that one entry is added to the grants as stored now: writing back the grants read when the
   * request was authenticated would undo a grant change made meanwhile (a revoke, say).
   */
  async grantCreator(actor: Actor, kind: EntityKind, id: number): Promise<void> {
    if (!actor.user.restricted) return;
    const grants = await this.users.changeGrants(actor.user.id, (g) => {
      g[kind][String(id)] = 'read_write';
    });
    if (grants) actor.user.grants = grants;
  }

  requireUnrestricted(actor: Actor): void {
    if (actor.user.restricted) throw new FulcrumError('forbidden', 'Unauthorized');
  }
}
