import { ErrorCollector, FulcrumError } from '../../../lib/errors.js';
import type { KeyValueRepository } from '../ports.js';
import type { UserRepository } from '../auth/repository.js';
import type { Actor, AuthService, EntityKind } from '../auth/auth-service.js';
import type { User } from '../auth/model.js';

type Body = Record<string, unknown>;

/**
 * A preferences object may be at most this long as JSON. Cloud Manager keeps a few KiB there
 * (sort orders, dismissed banners, theme); the cap stops a client from filling the store.
 */
export const MAX_PREFERENCES_BYTES = 64 * 1024;
/** How deep a preferences object may nest (a deep object costs the JSON parser and printer). */
const MAX_PREFERENCES_DEPTH = 16;

/** An entity that carries tags, as a product area lists it for /tags. */
export interface TaggedEntity {
  kind: EntityKind;
  id: number;
  label: string;
  tags: string[];
  /** The entity as its own GET endpoint answers it (GET /tags/{label} lists those objects). */
  show: () => Promise<Record<string, unknown>>;
}

/** A notification in the domain's terms; the route writes it as the API's Notification. */
export interface Notice {
  type: 'maintenance_scheduled' | 'notice';
  severity: 'minor' | 'major' | 'critical';
  label: string;
  message: string;
  /** What the notice is about; null for one about the install (e.g. a data plane), shown to unrestricted users only. */
  entity: { kind: EntityKind; id: number; label: string; url: string } | null;
  /** ms since the epoch, when the thing happens; null when not known. */
  when: number | null;
  until: number | null;
}

/** The account settings Fulcrum keeps; they change nothing here (there are no Linodes), but are kept as set. */
export interface AccountSettings {
  network_helper: boolean;
  backups_enabled: boolean;
  interfaces_for_new_linodes: string;
  maintenance_policy: string;
}

const SETTINGS_KEY = 'account.settings';
const defaultSettings: AccountSettings = {
  network_helper: true,
  backups_enabled: false,
  interfaces_for_new_linodes: 'legacy_config_only',
  maintenance_policy: 'linode/migrate',
};
const interfaceSettings = ['legacy_config_only', 'legacy_config_default_but_linode_allowed', 'linode_default_but_legacy_config_allowed', 'linode_only'];
const maintenancePolicies = ['linode/migrate', 'linode/power_off_on'];

/**
 * The account surface clients read before anything else: the caller's profile and preferences,
 * the account with what this install serves, account settings, notifications and tags. Product
 * areas register what they contribute (capabilities, tagged entities, notices), as they register
 * grant entities with the UserService.
 */
export class AccountService {
  private readonly capabilities: string[] = [];
  private readonly tagged: (() => Promise<TaggedEntity[]>)[] = [];
  private readonly notices: (() => Promise<Notice[]>)[] = [];

  constructor(
    private readonly users: UserRepository,
    private readonly auth: AuthService,
    private readonly kv: KeyValueRepository,
  ) {}

  registerCapability(name: string): void {
    if (!this.capabilities.includes(name)) this.capabilities.push(name);
  }

  registerTagged(lister: () => Promise<TaggedEntity[]>): void {
    this.tagged.push(lister);
  }

  registerNotices(source: () => Promise<Notice[]>): void {
    this.notices.push(source);
  }

  /** The caller, read again so that a change made by another request shows. */
  async profile(actor: Actor): Promise<User> {
    const u = await this.users.get(actor.user.id);
    if (!u) throw FulcrumError.notFound();
    return u;
  }

  /**
   * PUT /profile: `email` and `timezone` change; every other Profile field is either read-only
   * (username, uid, restricted, ...) or names a feature Fulcrum does not have (two-factor, Lish,
   * IP whitelisting), and is refused when it asks for a value other than the one served.
   */
  async updateProfile(actor: Actor, body: Body): Promise<User> {
    const u = await this.profile(actor);
    const errs = new ErrorCollector();
    const patch: { email?: string; timezone?: string } = {};
    for (const [k, v] of Object.entries(body)) {
      if (k === 'email') {
        if (typeof v !== 'string' || v.length > 128 || !/^[^\s@]+@[^\s@]+$/.test(v)) errs.add('email', 'Must be a valid email address.');
        else patch.email = v;
      } else if (k === 'timezone') {
        if (typeof v !== 'string' || v.length > 64 || !validTimezone(v)) errs.add('timezone', 'timezone must be a valid IANA time zone name');
        else patch.timezone = v;
      } else if (k in readOnlyProfile) {
        const served = readOnlyProfile[k]!(u);
        if (JSON.stringify(v) !== JSON.stringify(served)) errs.add(k, `${k} cannot be changed on this server`);
      } else errs.add(k, `Unknown profile field ${k}`);
    }
    errs.throwIfAny();
    if (patch.email !== undefined || patch.timezone !== undefined) await this.users.update(u.id, patch);
    return this.profile(actor);
  }

  async preferences(actor: Actor): Promise<Record<string, unknown>> {
    const text = await this.users.preferences(actor.user.id);
    if (text === undefined) throw FulcrumError.notFound();
    return JSON.parse(text) as Record<string, unknown>;
  }

  /** Replaces the caller's preferences whole, as the real API does. */
  async setPreferences(actor: Actor, body: unknown): Promise<Record<string, unknown>> {
    if (body === null || typeof body !== 'object' || Array.isArray(body)) throw FulcrumError.field('preferences', 'preferences must be a JSON object');
    if (depth(body, 0) > MAX_PREFERENCES_DEPTH) throw FulcrumError.field('preferences', `preferences may nest at most ${MAX_PREFERENCES_DEPTH} levels`);
    const text = JSON.stringify(body);
    if (Buffer.byteLength(text) > MAX_PREFERENCES_BYTES) throw FulcrumError.field('preferences', `preferences may be at most ${MAX_PREFERENCES_BYTES} bytes as JSON`);
    await this.users.setPreferences(actor.user.id, text);
    return this.preferences(actor);
  }

  /**
   * The account object. The real API answers it to unrestricted users and to restricted users
   * with the `account_access` grant; Fulcrum does not store that grant (it refuses setting it),
   * so a restricted user gets 403 here and on the account settings.
   */
  account(actor: Actor): { capabilities: string[] } {
    this.auth.requireUnrestricted(actor);
    return { capabilities: [...this.capabilities] };
  }

  async settings(actor: Actor): Promise<AccountSettings> {
    this.auth.requireUnrestricted(actor);
    return this.readSettings();
  }

  async updateSettings(actor: Actor, body: Body): Promise<AccountSettings> {
    this.auth.requireUnrestricted(actor);
    // A PUT changes only the keys it names: read and write in one transaction where several
    // replicas write (PostgreSQL), so two PUTs of different keys at once both hold.
    return this.kv.atomically ? this.kv.atomically(() => this.applySettings(body)) : this.applySettings(body);
  }

  private async applySettings(body: Body): Promise<AccountSettings> {
    const current = await this.readSettings();
    const next = { ...current };
    const errs = new ErrorCollector();
    for (const [k, v] of Object.entries(body)) {
      if (k === 'network_helper' || k === 'backups_enabled') {
        if (typeof v !== 'boolean') errs.add(k, `${k} must be a boolean`);
        else next[k] = v;
      } else if (k === 'interfaces_for_new_linodes') {
        if (typeof v !== 'string' || !interfaceSettings.includes(v)) errs.add(k, `${k} must be one of ${interfaceSettings.join(', ')}`);
        else next[k] = v;
      } else if (k === 'maintenance_policy') {
        if (typeof v !== 'string' || !maintenancePolicies.includes(v)) errs.add(k, `${k} must be one of ${maintenancePolicies.join(', ')}`);
        else next[k] = v;
      } else if (k in fixedSettings) {
        // Read-only on the real API too (managed, object_storage, longview_subscription).
        if (JSON.stringify(v) !== JSON.stringify(fixedSettings[k])) errs.add(k, `${k} cannot be changed on this server`);
      } else errs.add(k, `Unknown account setting ${k}`);
    }
    errs.throwIfAny();
    await this.kv.set(SETTINGS_KEY, JSON.stringify(next));
    return next;
  }

  /** Notifications the caller may see: a restricted user only those about entities it can read. */
  async notifications(actor: Actor): Promise<Notice[]> {
    const all = (await Promise.all(this.notices.map((source) => source()))).flat();
    return all.filter((n) => {
      if (!actor.user.restricted) return true;
      const e = n.entity;
      return e !== null && this.auth.canRead(actor, e.kind, e.id);
    });
  }

  /** Every tag on an entity the caller can read, sorted, each once. */
  async tags(actor: Actor): Promise<string[]> {
    const labels = new Set<string>();
    for (const e of await this.visibleTagged(actor)) for (const t of e.tags) labels.add(t);
    return [...labels].sort();
  }

  /** The entities carrying `label`; 404 when the caller sees no entity with that tag. */
  async taggedWith(actor: Actor, label: string): Promise<TaggedEntity[]> {
    const found = (await this.visibleTagged(actor)).filter((e) => e.tags.includes(label));
    if (found.length === 0) throw FulcrumError.notFound();
    return found;
  }

  private async visibleTagged(actor: Actor): Promise<TaggedEntity[]> {
    const all = (await Promise.all(this.tagged.map((l) => l()))).flat();
    return all.filter((e) => !actor.user.restricted || this.auth.canRead(actor, e.kind, e.id));
  }

  private async readSettings(): Promise<AccountSettings> {
    const text = await this.kv.get(SETTINGS_KEY);
    return text === undefined ? { ...defaultSettings } : { ...defaultSettings, ...(JSON.parse(text) as Partial<AccountSettings>) };
  }
}

/** Settings the API shows but no client can change. */
export const fixedSettings: Record<string, unknown> = { managed: false, object_storage: 'disabled', longview_subscription: null };

/** Profile fields that are served but cannot be changed here, with the value served. */
export const readOnlyProfile: Record<string, (u: User) => unknown> = {
  username: (u) => u.username,
  uid: (u) => u.id,
  restricted: (u) => u.restricted,
  user_type: () => 'default',
  authentication_type: () => 'password',
  authorized_keys: () => null,
  email_notifications: () => false,
  ip_whitelist_enabled: () => false,
  lish_auth_method: () => 'disabled',
  two_factor_auth: () => false,
  verified_phone_number: () => null,
  referrals: () => ({ code: '', completed: 0, credit: 0, pending: 0, total: 0, url: '' }),
};

function validTimezone(v: string): boolean {
  try {
    new Intl.DateTimeFormat('en', { timeZone: v });
    return true;
  } catch {
    return false;
  }
}

function depth(v: unknown, d: number): number {
  if (d > MAX_PREFERENCES_DEPTH) return d;
  if (v === null || typeof v !== 'object') return d;
  let max = d + 1;
  for (const x of Object.values(v as object)) max = Math.max(max, depth(x, d + 1));
  return max;
}
