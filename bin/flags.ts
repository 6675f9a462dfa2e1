/**
 * Every `fulcrum` command's flags, and the usage text made from them (`fulcrum --help`): a flag
 * added here is parsed, accepted in a config file and shown in the usage at once.
 */
import { flagUsage, type FlagSpec } from '../lib/args.js';

const rateLimits = {
  'api-rate-limit': { kind: 'number', help: 'API requests per token per minute' },
  'api-ip-rate-limit': { kind: 'number', help: 'API requests per client address per minute' },
  'api-stats-rate-limit': { kind: 'number', help: 'stats requests per token per minute' },
} as const satisfies FlagSpec;

const insecureListen = { kind: 'boolean', help: 'plain HTTP on a non-loopback --api-host (refused otherwise)' } as const;

export const labFlags = {
  state: { kind: 'string', arg: 'DIR', help: 'the lab\'s state folder', defaultText: './.fulcrum-lab' },
  'api-port': { kind: 'number', help: 'the API\'s port', defaultText: '8080' },
  'api-host': { kind: 'string', arg: 'H', help: 'the API\'s address', defaultText: '127.0.0.1' },
  runtime: { kind: 'string', arg: 'process|docker', help: 'how databases run', defaultText: 'process' },
  'api-tls': { kind: 'boolean', help: 'HTTPS with a lab CA' },
  ...rateLimits,
  'api-insecure-listen': insecureListen,
} as const satisfies FlagSpec;

/** What a data plane and an agent share: who the host is and how it reaches the control plane. */
const hostFlags = {
  'control-plane': { kind: 'string', arg: 'HOST:PORT[,HOST:PORT...]', help: 'the control plane\'s replicas (required)' },
  state: { kind: 'string', arg: 'DIR', help: 'the state folder (required)' },
  join: { kind: 'string', arg: 'TOKEN', help: 'a join token, on the first start' },
  id: { kind: 'string', arg: 'ID', help: 'this host\'s id (from the certificate when joined)' },
  region: { kind: 'string', arg: 'R', help: 'this host\'s region (from the certificate when joined)' },
  'insecure-grpc': { kind: 'boolean', help: 'plain gRPC without certificates (single-machine experiments)' },
  'metrics-host': { kind: 'string', arg: 'H', help: 'address of the metrics endpoint', defaultText: '127.0.0.1' },
  'metrics-port': { kind: 'number', help: 'port of the metrics endpoint (none without it)' },
} as const satisfies FlagSpec;

export const controlPlaneFlags = {
  state: { kind: 'string', arg: 'DIR', help: 'the state folder (required)' },
  store: { kind: 'string', arg: 'sqlite|postgres://...', help: 'where the state is kept', defaultText: 'sqlite' },
  'kek-file': { kind: 'string', arg: 'PATH', help: 'the key that seals the stored secrets', defaultText: 'DIR/keys/kek' },
  'api-host': { kind: 'string', arg: 'H', help: 'the API\'s address', defaultText: '127.0.0.1' },
  'api-port': { kind: 'number', help: 'the API\'s port', default: 8080 },
  'api-cert': { kind: 'string', arg: 'FILE', help: 'the API\'s TLS certificate (with --api-key)' },
  'api-key': { kind: 'string', arg: 'FILE', help: 'the API\'s TLS key (with --api-cert)' },
  'api-insecure-listen': insecureListen,
  'api-request-timeout': { kind: 'number', arg: 'SECONDS', help: 'longest API request, 1-3600', defaultText: '30' },
  'api-idle-timeout': { kind: 'number', arg: 'SECONDS', help: 'idle keep-alive API connection, 1-3600', defaultText: '75' },
  'api-max-connections': { kind: 'number', help: 'open API connections', defaultText: '4096' },
  'api-max-connections-per-address': { kind: 'number', help: 'open API connections per client address', defaultText: '256' },
  ...rateLimits,
  'client-ipv6-prefix': { kind: 'number', arg: '1-128', help: 'an IPv6 client is its /N for the per-address limit', defaultText: '64' },
  'grpc-host': { kind: 'string', arg: 'H', help: 'the hosts\' gRPC address', defaultText: '127.0.0.1' },
  'grpc-port': { kind: 'number', help: 'the hosts\' gRPC port', default: 8081 },
  'bootstrap-port': { kind: 'number', help: 'the join and renewal port', defaultText: 'the last run\'s, else the gRPC port + 1' },
  'bootstrap-max-connections': { kind: 'number', help: 'open join connections', defaultText: '512' },
  'bootstrap-max-connections-per-address': { kind: 'number', help: 'open join connections per address', defaultText: '16' },
  'bootstrap-rate-limit': { kind: 'number', help: 'joins per address per minute', defaultText: '120' },
  'insecure-grpc': { kind: 'boolean', help: 'plain gRPC without certificates (single-machine experiments)' },
  'metrics-host': { kind: 'string', arg: 'H', help: 'address of the metrics endpoint', defaultText: '127.0.0.1' },
  'metrics-port': { kind: 'number', help: 'port of the metrics endpoint (none without it)' },
  'backend-networks': { kind: 'string', arg: 'CIDR,...', help: 'where NodeBalancer nodes may be' },
  'backend-exclude': { kind: 'string', arg: 'CIDR,...', help: 'where NodeBalancer nodes may not be' },
  'nodebalancer-pool': { kind: 'string', arg: 'CIDR|REGION=CIDR,...', help: 'NodeBalancers\' ipv4', defaultText: '127.77.0.0/16' },
  'nodebalancer-ipv6-pool': { kind: 'string', arg: 'IPV6/64..128', help: 'NodeBalancers\' ipv6 (none: null)' },
  'database-pool': { kind: 'string', arg: 'CIDR|REGION=CIDR,...', help: 'database endpoints\' addresses', defaultText: '127.78.0.0/16' },
  'hostname-suffix': { kind: 'string', arg: 'SUFFIX', help: 'of NodeBalancers\' and databases\' host names', defaultText: '.ip.linodeusercontent.com' },
  'host-lost-after': { kind: 'number', arg: 'SECONDS', help: '60-604800: an agent host without a stream that long is declared lost', defaultText: 'off' },
} as const satisfies FlagSpec;

export const dataplaneFlags = {
  ...hostFlags,
  nofile: { kind: 'number', help: 'the descriptor limit to raise to' },
  'max-conns-per-client': { kind: 'number', help: 'connections per client per NodeBalancer' },
  'max-conns-per-client-total': { kind: 'number', help: 'connections per client in all' },
  'max-conns-per-nodebalancer': { kind: 'number', help: 'connections per NodeBalancer' },
  'fd-reserve': { kind: 'number', help: 'descriptors kept free' },
  'tcp-idle-timeout': { kind: 'number', arg: 'SECONDS', help: 'idle tcp connection' },
  'udp-new-sessions-per-client': { kind: 'number', help: 'new UDP sessions per client per second, 0 = off', defaultText: '2500' },
  'client-ipv6-prefix': { kind: 'number', arg: '1-128', help: 'an IPv6 client is its /N for every per-client limit', defaultText: '64' },
  'endpoint-source': { kind: 'string', arg: 'IP', help: 'the address database members are dialled from' },
  'vrrp-interface': { kind: 'string', arg: 'IFACE', help: 'pair mode: addresses held through keepalived' },
  'vrrp-peers': { kind: 'string', arg: 'IP,...', help: 'pair mode: the other data planes (with --vrrp-interface)' },
  'vrrp-priority': { kind: 'number', arg: '1-254', help: 'pair mode (with --vrrp-interface)', defaultText: '100' },
  'vrrp-router-id': { kind: 'number', arg: '1-255', help: 'pair mode (with --vrrp-interface)', defaultText: '51' },
  workers: { kind: 'number', help: '1 = one process', defaultText: 'the number of cores' },
  distribution: { kind: 'string', arg: 'kernel|rr', help: 'how workers share connections', default: 'kernel' },
  'drain-time': { kind: 'number', arg: 'SECONDS', help: 'a replaced worker\'s connections may run on', defaultText: '30' },
  'worker-apply-timeout': { kind: 'number', arg: 'SECONDS', help: 'a worker that applies longer is replaced', defaultText: '60' },
  'wildcard-listeners': { kind: 'boolean', help: 'one socket per port, only when the data plane owns its ports on every address' },
} as const satisfies FlagSpec;

export const dataplaneReloadFlags = {
  state: { kind: 'string', arg: 'DIR', help: 'the running data plane\'s state folder (required)' },
} as const satisfies FlagSpec;

export const agentFlags = {
  ...hostFlags,
  runtime: { kind: 'string', arg: 'process|docker', help: 'how databases run', default: 'process' },
  engines: { kind: 'string', arg: 'FILE', help: 'the engines this host may run besides the ones it finds' },
  'node-pool': { kind: 'string', arg: 'CIDR', help: 'addresses members listen on (this host\'s)', defaultText: '127.79.0.0/16' },
  'stop-nodes-on-exit': { kind: 'boolean', help: 'stop the databases\' servers when the agent stops' },
  'binlog-archive-interval': { kind: 'number', arg: 'SECONDS', help: 'how often each database\'s binlog is archived, 1-3600: the recovery point of a 1-node database on a lost host', defaultText: '60' },
  'backup-store': { kind: 'string', arg: 's3://BUCKET/PREFIX', help: 'keep backups and the binlog archive in an S3-compatible object store', defaultText: 'the state folder' },
  'backup-store-endpoint': { kind: 'string', arg: 'https://HOST[:PORT]', help: 'the object store\'s endpoint', defaultText: 'AWS for the region' },
  'backup-store-region': { kind: 'string', arg: 'REGION', help: 'the object store\'s signing region', defaultText: 'us-east-1' },
  'backup-store-path-style': { kind: 'boolean', help: 'bucket in the path, not the host name (most self-hosted stores)' },
  'backup-store-ca': { kind: 'string', arg: 'FILE', help: 'PEM CA for the object store\'s TLS', defaultText: 'the system\'s' },
  'backup-store-credentials': { kind: 'string', arg: 'FILE', help: 'JSON {accessKeyId, secretAccessKey}, mode 0600' },
  'backup-store-access-key-id': { kind: 'string', arg: 'ID', help: 'the object store\'s key id (config file)' },
  'backup-store-secret-access-key': { kind: 'string', arg: 'KEY', help: 'the object store\'s secret key: config file (0600) only' },
} as const satisfies FlagSpec;

/** The backup-store flags' values as the agent's options (parsed where the store's config lives). */
export { backupStoreFlags } from '../agent/backup/store-config.js';

const storeFlags = {
  state: { kind: 'string', arg: 'DIR', help: 'the control plane\'s state folder (required)' },
  store: { kind: 'string', arg: 'sqlite|postgres://...', help: 'when the store is PostgreSQL', defaultText: 'sqlite' },
  'kek-file': { kind: 'string', arg: 'PATH', defaultText: 'DIR/keys/kek' },
} as const satisfies FlagSpec;

export const joinTokenFlags = {
  ...storeFlags,
  role: { kind: 'string', arg: 'dataplane|agent', help: '(required)' },
  id: { kind: 'string', arg: 'ID', help: 'the host\'s id (required)' },
  region: { kind: 'string', arg: 'R', defaultText: '*' },
  'expiry-seconds': { kind: 'number', defaultText: '3600' },
} as const satisfies FlagSpec;

export const tokenFlags = {
  ...storeFlags,
  label: { kind: 'string', arg: 'L', defaultText: 'cli' },
  scopes: { kind: 'string', arg: 'S', defaultText: '*' },
  expiry: { kind: 'string', arg: 'YYYY-MM-DDTHH:MM:SS' },
  user: { kind: 'string', arg: 'NAME', help: 'made when new', defaultText: 'admin' },
  restricted: { kind: 'boolean', help: 'a new user is restricted' },
  grants: { kind: 'string', arg: 'add_nodebalancers,add_databases', help: 'a new user\'s global grants' },
} as const satisfies FlagSpec;

export const kekRotateFlags = {
  state: storeFlags.state,
  'kek-file': storeFlags['kek-file'],
} as const satisfies FlagSpec;

export const storeMigrateFlags = storeFlags;

/** `fulcrum host lost ID`: the id is the one argument that is not a flag. */
export const hostLostFlags = {
  state: storeFlags.state,
  store: storeFlags.store,
  'kek-file': storeFlags['kek-file'],
} as const satisfies FlagSpec;

/** The commands in the order the usage lists them: name, what it does, its flags. */
export const commands: readonly { name: string; summary: string; flags: FlagSpec }[] = [
  { name: 'lab', summary: 'start control plane, data plane and agent on this machine', flags: labFlags },
  { name: 'control-plane', summary: 'the API, the store and the hosts\' gRPC streams', flags: controlPlaneFlags },
  { name: 'dataplane', summary: 'the proxy: NodeBalancers and database endpoints', flags: dataplaneFlags },
  { name: 'dataplane reload', summary: 'new workers on the same listeners, the old ones drain (or SIGHUP)', flags: dataplaneReloadFlags },
  { name: 'agent', summary: 'runs databases\' servers on this host', flags: agentFlags },
  { name: 'join-token create', summary: 'a one-time token for a new data plane or agent (on the control plane\'s host)', flags: joinTokenFlags },
  { name: 'token create', summary: 'an API token', flags: tokenFlags },
  { name: 'kek rotate', summary: 'a new key for the secrets in the control-plane store', flags: kekRotateFlags },
  { name: 'store migrate', summary: 'bring the store\'s schema up to date', flags: storeMigrateFlags },
  { name: 'host lost', summary: 'ID: fence an agent host and re-place its members (on the control plane\'s host)', flags: hostLostFlags },
  { name: 'host drain', summary: 'ID: move every member off an agent host before maintenance (on the control plane\'s host)', flags: hostLostFlags },
  { name: 'host undrain', summary: 'ID: end a drain; the host takes new members again (on the control plane\'s host)', flags: hostLostFlags },
];

/** Commands that also take `--config FILE` (lib/config-file.ts). */
const configured = new Set(['control-plane', 'dataplane', 'agent']);

/** `fulcrum --help`: every command and its flags, from the specs above. */
export function usage(): string {
  const out = ['usage: fulcrum <command> [options]', ''];
  for (const c of commands) {
    out.push(`  ${c.name.padEnd(14)} ${c.summary}`);
    if (configured.has(c.name)) out.push('    --config FILE   `key = value` lines named like the flags (docs/install.md); flags on the command line win');
    out.push(...flagUsage(c.flags), '');
  }
  return out.join('\n');
}

/** One command's usage, for its errors. */
export function commandUsage(name: string): string {
  const c = commands.find((x) => x.name === name)!;
  return [`usage: fulcrum ${c.name} [options]`, ...flagUsage(c.flags)].join('\n');
}

/** A SECONDS flag of 1-3600 as ms (undefined when not given); another value is refused, naming the flag. */
export function secondsMs(f: Record<string, unknown>, name: string): number | undefined {
  const v = f[name] as number | undefined;
  if (v !== undefined && !(v >= 1 && v <= 3600)) throw new Error(`--${name} must be 1 to 3600 seconds`);
  return v === undefined ? undefined : v * 1000;
}
