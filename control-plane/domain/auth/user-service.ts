import { ErrorCollector, FulcrumError } from '../../../lib/errors.js';
import type { UserRepository } from './repository.js';
import type { Grants, User } from './model.js';
import { usernameUnique, type Actor, type AuthService, type EntityKind } from './auth-service.js';

type Body = Record<string, unknown>;

/** Lists the entities of one kind that grants can name, with their labels. */
export type EntityLister = () => Promise<{ id: number; label: string }[]>;

const USERNAME = /^[a-zA-Z0-9]((?![_-]{2,})[a-zA-Z0-9-_])+[a-zA-Z0-9]$/;
const EMAIL = /^[^\s@]+@[^\s@]+$/;

/** The global grants (GrantsResponse.global); only the add_* we enforce change anything. */
const globalBooleans = ['add_linodes', 'add_longview', 'longview_subscription', 'cancel_account', 'add_domains', 'add_stackscripts',
  'add_nodebalancers', 'add_images', 'add_volumes', 'add_firewalls', 'add_databases', 'add_vpcs',
  // Since 4.176: today's clients read both (@linode/api-v4 GlobalGrantTypes).
  'add_lkes', 'add_kubernetes'] as const;
/** Kinds of entity Fulcrum does not have: always empty lists (firewall and lkecluster since 4.176). */
const otherKinds = ['linode', 'domain', 'image', 'longview', 'stackscript', 'volume', 'vpc', 'firewall', 'lkecluster'] as const;
const kinds: EntityKind[] = ['nodebalancer', 'database'];

/**
 * Account users and their grants (/account/users, /account/users/{username}/grants,
 * /profile/grants). Only unrestricted users manage users, as on the real service. Product areas
 * register an EntityLister per kind so that grants list every entity with its label.
 */
export class UserService {
  private readonly listers = new Map<EntityKind, EntityLister>();

  constructor(
    private readonly users: UserRepository,
    private readonly auth: AuthService,
  ) {}

  registerEntities(kind: EntityKind, lister: EntityLister): void {
    this.listers.set(kind, lister);
  }

  list(actor: Actor): Promise<User[]> {
    this.auth.requireUnrestricted(actor);
    return this.users.list();
  }

  async get(actor: Actor, username: string): Promise<User> {
    this.auth.requireUnrestricted(actor);
    const u = await this.users.byUsername(username);
    if (!u) throw FulcrumError.notFound();
    return u;
  }

  async create(actor: Actor, body: Body): Promise<User> {
    this.auth.requireUnrestricted(actor);
    const errs = new ErrorCollector();
    const username = await this.username(errs, body.username, true);
    const email = this.email(errs, body.email, true);
    let restricted = true;
    if (body.restricted !== undefined && body.restricted !== null) {
      if (typeof body.restricted !== 'boolean') errs.add('restricted', 'restricted must be a boolean');
      else restricted = body.restricted;
    }
    errs.throwIfAny();
    return this.auth.createUser(username!, restricted, { global: {}, nodebalancer: {}, database: {} }, email!);
  }

  async update(actor: Actor, username: string, body: Body): Promise<User> {
    const u = await this.get(actor, username);
    const errs = new ErrorCollector();
    const patch: Partial<Pick<User, 'username' | 'email' | 'restricted'>> = {};
    if (body.username !== undefined && body.username !== u.username) patch.username = await this.username(errs, body.username, true);
    if (body.email !== undefined) patch.email = this.email(errs, body.email, true);
    if (body.restricted !== undefined) {
      if (typeof body.restricted !== 'boolean') errs.add('restricted', 'restricted must be a boolean');
      else if (u.id === actor.user.id && body.restricted) errs.add('restricted', 'You cannot restrict yourself');
      else patch.restricted = body.restricted;
    }
    errs.throwIfAny();
    await usernameUnique(() => this.users.update(u.id, patch));
    return (await this.users.get(u.id))!;
  }

  async delete(actor: Actor, username: string): Promise<void> {
    const u = await this.get(actor, username);
    if (u.id === actor.user.id) throw FulcrumError.field('username', 'You cannot delete yourself');
    await this.users.delete(u.id);
  }

  async grants(actor: Actor, username: string): Promise<Record<string, unknown>> {
    return this.grantsToWire((await this.get(actor, username)).grants);
  }

  /** The caller's own grants; undefined for an unrestricted user (the API answers 204). */
  async profileGrants(actor: Actor): Promise<Record<string, unknown> | undefined> {
    if (!actor.user.restricted) return undefined;
    const visible = (await this.grantsToWire(actor.user.grants)) as Record<string, unknown>;
    for (const k of kinds) visible[k] = (visible[k] as { permissions: unknown }[]).filter((g) => g.permissions !== null);
    return visible;
  }

  /**
   * Applies a partial GrantsResponse: listed entries change, everything else stays. The body is
   * checked against the grants read first; the listed entries are then applied to the grants as
   * stored at write time, in one transaction, so a creator grant added meanwhile is kept.
   */
  async updateGrants(actor: Actor, username: string, body: Body): Promise<Record<string, unknown>> {
    const u = await this.get(actor, username);
    const errs = new ErrorCollector();
    const next: Grants = structuredClone(u.grants);
    const edits: ((g: Grants) => void)[] = [];
    if (body.global !== undefined && body.global !== null) {
      if (typeof body.global !== 'object' || Array.isArray(body.global)) errs.add('global', 'global must be an object');
      else {
        for (const [k, v] of Object.entries(body.global as Body)) {
          if (k === 'account_access' || k === 'child_account_access') {
            if (v !== null && v !== undefined) errs.add(`global.${k}`, `${k} is not supported by this server`);
          } else if (!(globalBooleans as readonly string[]).includes(k)) errs.add(`global.${k}`, `Unknown global grant ${k}`);
          else if (typeof v !== 'boolean') errs.add(`global.${k}`, `${k} must be a boolean`);
          else {
            next.global[k] = v;
            edits.push((g) => void (g.global[k] = v));
          }
        }
      }
    }
    for (const kind of [...kinds, ...otherKinds] as string[]) {
      const list = body[kind];
      if (list === undefined || list === null) continue;
      if (!Array.isArray(list)) {
        errs.add(kind, `${kind} must be an array`);
        continue;
      }
      const managed = kinds.includes(kind as EntityKind);
      const known = managed ? await this.entities(kind as EntityKind, next) : new Map<number, string>();
      // Without a lister for the kind (its product area not wired in), any positive id is taken.
      const exists = (id: number) => known.has(id) || (managed && !this.listers.has(kind as EntityKind) && id > 0);
      list.forEach((g, i) => {
        const at = `${kind}[${i}]`;
        if (g === null || typeof g !== 'object' || Array.isArray(g)) return errs.add(at, 'grant must be an object');
        const { id, permissions } = g as Body;
        if (typeof id !== 'number' || !Number.isInteger(id) || !exists(id)) return errs.add(`${at}.id`, `No ${kind} with id ${String(id)} on this account`);
        if (permissions !== null && permissions !== 'read_only' && permissions !== 'read_write') {
          return errs.add(`${at}.permissions`, 'permissions must be read_only, read_write or null');
        }
        const set = (g: Grants) => {
          const map = g[kind as EntityKind];
          if (permissions === null) delete map[String(id)];
          else map[String(id)] = permissions;
        };
        set(next);
        edits.push(set);
      });
    }
    errs.throwIfAny();
    const saved = await this.users.changeGrants(u.id, (g) => edits.forEach((edit) => edit(g)));
    if (!saved) throw FulcrumError.notFound();
    return this.grantsToWire(saved);
  }

  private async username(errs: ErrorCollector, v: unknown, required: boolean): Promise<string | undefined> {
    if (v === undefined || v === null) {
      if (required) errs.add('username', 'username is required');
      return undefined;
    }
    if (typeof v !== 'string' || v.length < 3 || v.length > 32 || !USERNAME.test(v)) {
      errs.add('username', 'Username must be 3-32 letters, digits, dashes or underscores, starting and ending with a letter or digit');
      return undefined;
    }
    // Reported here together with the other fields; a name taken meanwhile by another writer
    // (another replica) is refused by the store's constraint instead (usernameUnique).
    if (await this.users.byUsername(v)) {
      errs.add('username', 'Username is taken');
      return undefined;
    }
    return v;
  }

  private email(errs: ErrorCollector, v: unknown, required: boolean): string | undefined {
    if (v === undefined || v === null) {
      if (required) errs.add('email', 'email is required');
      return undefined;
    }
    if (typeof v !== 'string' || v.length > 128 || !EMAIL.test(v)) {
      errs.add('email', 'Must be a valid email address.');
      return undefined;
    }
    return v;
  }

  /** Entities grants may name: those a registered lister reports, plus any already granted. */
  private async entities(kind: EntityKind, grants: Grants): Promise<Map<number, string>> {
    const out = new Map<number, string>();
    const lister = this.listers.get(kind);
    if (lister) for (const e of await lister()) out.set(e.id, e.label);
    else for (const id of Object.keys(grants[kind])) out.set(Number(id), '');
    return out;
  }

  private async grantsToWire(g: Grants): Promise<Record<string, unknown>> {
    const global: Record<string, boolean | null> = {};
    for (const k of globalBooleans) global[k] = g.global[k] === true;
    global.account_access = null;
    global.child_account_access = null;
    const out: Record<string, unknown> = { global };
    for (const kind of kinds) {
      out[kind] = [...(await this.entities(kind, g))].map(([id, label]) => ({ id, label, permissions: g[kind][String(id)] ?? null }));
    }
    for (const kind of otherKinds) out[kind] = [];
    return out;
  }
}
