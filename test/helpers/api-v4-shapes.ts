/**
 * Response schemas for the account endpoints the official 4.176 subset does not carry
 * (/profile, /profile/preferences, /account, /account/settings, /account/notifications, /tags),
 * written from the types of @linode/api-v4 0.158.0 (profile/types.d.ts, account/types.d.ts,
 * tags/types.d.ts): every key of the type required, no other key allowed, enums as typed.
 * api-schema.ts checks a body against these when the official fixture has no operation for it.
 */
type Json = Record<string, unknown>;

const str = { type: 'string' };
const bool = { type: 'boolean' };
const int = { type: 'integer' };
const num = { type: 'number' };
const nullable = (t: string) => ({ type: [t, 'null'] });
const wireTime = { type: 'string', pattern: '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}$' };
const strict = (properties: Json, optional: string[] = []): Json => ({
  type: 'object',
  properties,
  required: Object.keys(properties).filter((k) => !optional.includes(k)),
  additionalProperties: false,
});
const page = (item: Json): Json => strict({ data: { type: 'array', items: item }, page: int, pages: int, results: int });

export const profileSchema = strict({
  authentication_type: { enum: ['github', 'google', 'password'] },
  authorized_keys: { anyOf: [{ type: 'null' }, { type: 'array', items: str }] },
  email: str,
  email_notifications: bool,
  ip_whitelist_enabled: bool,
  lish_auth_method: { enum: ['disabled', 'keys_only', 'password_keys'] },
  referrals: strict({ code: str, completed: num, credit: num, pending: num, total: num, url: str }),
  restricted: bool,
  timezone: str,
  two_factor_auth: bool,
  uid: int,
  user_type: { enum: ['child', 'default', 'delegate', 'parent', 'proxy'] },
  username: str,
  verified_phone_number: nullable('string'),
});

/** AccountCapability of @linode/api-v4 0.158.0 (accountCapabilities). */
const accountCapabilities = ['Akamai Cloud Load Balancer', 'Akamai Cloud Pulse', 'Akamai Cloud Pulse Logs', 'Akamai Cloud Pulse Logs LKE-E Audit',
  'Block Storage', 'Block Storage Encryption', 'Cloud Firewall', 'Cloud Firewall Rule Set', 'CloudPulse', 'Disk Encryption', 'Kubernetes',
  'Kubernetes Enterprise', 'Kubernetes Enterprise BYO VPC', 'Kubernetes Enterprise Dual Stack', 'Linodes', 'Linode Interfaces',
  'LKE HA Control Planes', 'LKE Network Access Control List (IP ACL)', 'Machine Images', 'Managed Databases', 'Managed Databases Beta',
  'NETINT Quadra T1U', 'Network LoadBalancer', 'NodeBalancers', 'Object Storage Access Key Regions', 'Object Storage Endpoint Types',
  'Object Storage', 'Placement Group', 'SMTP Enabled', 'Support Ticket Severity', 'Vlans', 'VPCs', 'VPC Dual Stack'];

export const accountSchema = strict({
  active_promotions: { type: 'array' },
  active_since: wireTime,
  address_1: str, address_2: str,
  balance: num, balance_uninvoiced: num,
  billing_source: { enum: ['akamai', 'linode'] },
  capabilities: { type: 'array', items: { enum: accountCapabilities } },
  city: str, company: str, country: str,
  credit_card: strict({ card_type: { enum: ['American Express', 'Discover', 'JCB', 'MasterCard', 'Visa'] }, expiry: nullable('string'), last_four: nullable('string') }, ['card_type']),
  email: str, euuid: str, first_name: str, last_name: str, phone: str, state: str, tax_id: str, zip: str,
});

export const accountSettingsSchema = strict({
  backups_enabled: bool,
  interfaces_for_new_linodes: { enum: ['legacy_config_only', 'legacy_config_default_but_linode_allowed', 'linode_default_but_legacy_config_allowed', 'linode_only'] },
  longview_subscription: nullable('string'),
  maintenance_policy: { enum: ['linode/migrate', 'linode/power_off_on'] },
  managed: bool,
  network_helper: bool,
  object_storage: { enum: ['active', 'disabled', 'suspended'] },
});

export const notificationSchema = strict({
  body: nullable('string'),
  entity: { anyOf: [{ type: 'null' }, strict({ id: int, label: nullable('string'), type: str, url: str })] },
  label: str,
  message: str,
  severity: { enum: ['critical', 'major', 'minor'] },
  type: {
    enum: ['billing_email_bounce', 'maintenance', 'maintenance_in_progress', 'maintenance_pending', 'maintenance_scheduled', 'migration_pending',
      'migration_scheduled', 'notice', 'outage', 'payment_due', 'promotion', 'reboot_scheduled', 'security_reboot_maintenance_scheduled',
      'tax_id_verifying', 'ticket_abuse', 'ticket_important', 'user_email_bounce', 'volume_migration_imminent', 'volume_migration_scheduled'],
  },
  until: { anyOf: [{ type: 'null' }, wireTime] },
  when: { anyOf: [{ type: 'null' }, wireTime] },
});

/** GET /tags/{label}: the tagged objects, each its type and the object as its own endpoint shows it. */
const taggedObject = strict({ type: { enum: ['nodebalancer', 'database', 'linode', 'domain', 'volume'] }, data: { type: 'object' } });

/** OAuthClient of @linode/api-v4 (account/types.d.ts). */
const oauthClientSchema = strict({
  id: str, label: str, public: bool, redirect_uri: str, secret: str, status: { enum: ['active', 'disabled', 'suspended'] }, thumbnail_url: nullable('string'),
});

/** Operations typed from the client, by "METHOD /path" with {params}. */
export const clientTypedOperations: Record<string, Json> = {
  'GET /profile': profileSchema,
  'PUT /profile': profileSchema,
  'GET /profile/preferences': { type: 'object' },
  'PUT /profile/preferences': { type: 'object' },
  'GET /account': accountSchema,
  'GET /account/settings': accountSettingsSchema,
  'PUT /account/settings': accountSettingsSchema,
  'GET /account/notifications': page(notificationSchema),
  'GET /tags': page(strict({ label: str })),
  'GET /tags/{label}': page(taggedObject),
  // Things Fulcrum does not have: empty, or nothing withheld / agreed (docs/compatibility.md).
  'GET /networking/firewalls': page({ not: {} }),
  'GET /profile/sshkeys': page({ not: {} }),
  'GET /account/maintenance': page({ not: {} }),
  'GET /account/availability': page(strict({ region: str, unavailable: { type: 'array', items: str } })),
  'GET /account/agreements': strict({ billing_agreement: bool, eu_model: bool, privacy_policy: bool }),
};

/** /account/oauth-clients, typed from the client (test/integration/api/oauth-clients.test.ts covers each). */
export const oauthClientTypedOperations: Record<string, Json> = {
  'GET /account/oauth-clients': page(oauthClientSchema),
  'POST /account/oauth-clients': oauthClientSchema,
  'GET /account/oauth-clients/{clientId}': oauthClientSchema,
  'PUT /account/oauth-clients/{clientId}': oauthClientSchema,
  'POST /account/oauth-clients/{clientId}/reset-secret': oauthClientSchema,
};
