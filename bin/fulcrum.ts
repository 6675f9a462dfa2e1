/**
 * The `fulcrum` command: `lab` (everything on one machine), `control-plane`, `dataplane`,
 * `agent` (each on its own for multi-host installs), `token create` and `join-token create`.
 */
import { runLab } from './lab.js';
import { parseFlags } from '../lib/args.js';
import { restrictUmask } from '../lib/private-files.js';

const usage = `usage: fulcrum <command> [options]

  lab            start control plane, data plane and agent on this machine
                 --state DIR (default ./.fulcrum-lab)  --api-port N (default 8080)  --api-host H
                 --runtime process|docker (default process)  --api-tls (HTTPS with a lab CA)
                 --api-rate-limit N  --api-ip-rate-limit N  --api-stats-rate-limit N
                 --api-insecure-listen (plain HTTP on a non-loopback --api-host)
  control-plane, dataplane and agent also take --config FILE: \`key = value\` lines named like
                 their flags (docs/install.md); flags on the command line win
  control-plane  --state DIR --api-host H --api-port N --grpc-host H --grpc-port N
                 [--api-cert FILE --api-key FILE] [--metrics-host H --metrics-port N]
                 [--api-insecure-listen (plain HTTP on a non-loopback --api-host: refused otherwise)]
                 [--api-request-timeout SECONDS (30)] [--api-idle-timeout SECONDS (75)]
                 [--api-max-connections N (4096)] [--api-max-connections-per-address N (256)]
                 [--bootstrap-max-connections N (512)] [--bootstrap-max-connections-per-address N (16)]
                 [--bootstrap-rate-limit N (120 per minute per address)]
                 [--api-rate-limit N] [--api-ip-rate-limit N] [--api-stats-rate-limit N]
                 [--client-ipv6-prefix 1-128 (64: an IPv6 client is its /64 for the per-address limit)]
                 [--backend-networks CIDR,...] [--backend-exclude CIDR,...]
                 [--bootstrap-port N (default: the last run's, else grpc port + 1)] [--insecure-grpc]
                 [--kek-file PATH (default DIR/keys/kek)] [--store sqlite|postgres://... (default sqlite)]
                 [--nodebalancer-pool CIDR | REGION=CIDR,...] [--database-pool CIDR | REGION=CIDR,...]
                 [--nodebalancer-ipv6-pool IPV6/64..128 (NodeBalancers' ipv6; none: null)]
                 [--host-lost-after SECONDS (off; 60-604800: an agent host without a stream that long is declared lost)]
  dataplane      --control-plane HOST:PORT[,HOST:PORT...] --state DIR [--join TOKEN] [--metrics-port N]
                 [--id ID --region R (from the certificate when joined)] [--insecure-grpc]
                 [--nofile N] [--max-conns-per-client N] [--max-conns-per-client-total N]
                 [--max-conns-per-nodebalancer N] [--fd-reserve N] [--tcp-idle-timeout SECONDS]
                 [--udp-new-sessions-per-client N (per second, 2500; 0 = off)]
                 [--client-ipv6-prefix 1-128 (64: an IPv6 client is its /64 for every per-client limit)]
                 [--vrrp-interface IFACE --vrrp-peers IP,... [--vrrp-priority 1-254 (100)]
                  [--vrrp-router-id 1-255 (51)]]   pair mode: addresses held through keepalived
                 [--workers N (default: the number of cores; 1 = one process)]
                 [--distribution kernel|rr (default kernel)] [--drain-time SECONDS (default 30)]
                 [--worker-apply-timeout SECONDS (default 60)] [--wildcard-listeners (one socket per port,
                  only when the data plane owns its ports on every address)]
  dataplane reload --state DIR   new workers on the same listeners, the old ones drain (or SIGHUP)
  agent          --control-plane HOST:PORT[,HOST:PORT...] --state DIR --runtime process|docker [--join TOKEN]
                 [--metrics-port N] [--id ID --region R] [--insecure-grpc]
                 [--engines FILE (the engines this host may run besides the ones it finds)]
                 [--node-pool CIDR (default 127.79.0.0/16)]   addresses members listen on (this host's)
  join-token create  --state DIR --role dataplane|agent --id ID [--region R (default *)]
                 [--expiry-seconds N (default 3600)] [--kek-file PATH]   (on the control plane's host)
  token create   --state DIR [--label L] [--scopes S] [--expiry YYYY-MM-DDTHH:MM:SS]
                 [--user NAME [--restricted] [--grants add_nodebalancers,add_databases]] [--kek-file PATH]
  host lost ID   --state DIR [--kek-file PATH]   fence an agent host and re-place its members (on the control plane's host)
  kek rotate     --state DIR [--kek-file PATH]   a new key for the secrets in the control-plane store
  store migrate  --state DIR [--store sqlite|postgres://...] [--kek-file PATH]   bring the store's schema up to date
  join-token create and token create take --store too when the store is PostgreSQL
`;

async function main(argv: string[]): Promise<void> {
  // Everything a Fulcrum process writes is private to its user (docs/security/secrets.md).
  restrictUmask();
  const [cmd, ...rest] = argv;
  switch (cmd) {
    case 'lab':
      return runLab(parseFlags(rest, {
        state: 'string', 'api-port': 'number', 'api-host': 'string', runtime: 'string',
        'api-tls': 'boolean', 'api-rate-limit': 'number', 'api-ip-rate-limit': 'number', 'api-stats-rate-limit': 'number',
        'api-insecure-listen': 'boolean',
      }) as any);
    case 'control-plane': {
      const { runControlPlaneCommand } = await import('./commands.js');
      return runControlPlaneCommand(rest);
    }
    case 'dataplane': {
      const { runDataplaneCommand } = await import('./commands.js');
      return runDataplaneCommand(rest);
    }
    case 'agent': {
      const { runAgentCommand } = await import('./commands.js');
      return runAgentCommand(rest);
    }
    case 'join-token': {
      if (rest[0] !== 'create') throw new Error('usage: fulcrum join-token create --state DIR --role dataplane|agent --id ID [--region R]');
      const { runJoinTokenCreate } = await import('./commands.js');
      return runJoinTokenCreate(rest.slice(1));
    }
    case 'host': {
      if (rest[0] !== 'lost') throw new Error('usage: fulcrum host lost --state DIR ID');
      const { runHostLost } = await import('./commands.js');
      return runHostLost(rest.slice(1));
    }
    case 'token': {
      if (rest[0] !== 'create') throw new Error('usage: fulcrum token create --state DIR [...]');
      const { runTokenCreate } = await import('./commands.js');
      return runTokenCreate(rest.slice(1));
    }
    case 'kek': {
      if (rest[0] !== 'rotate') throw new Error('usage: fulcrum kek rotate --state DIR [--kek-file PATH]');
      const { runKekRotate } = await import('./commands.js');
      return runKekRotate(rest.slice(1));
    }
    case 'store': {
      if (rest[0] !== 'migrate') throw new Error('usage: fulcrum store migrate --state DIR [--store sqlite|postgres://...]');
      const { runStoreMigrate } = await import('./commands.js');
      return runStoreMigrate(rest.slice(1));
    }
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(usage);
      return;
    default:
      throw new Error(`unknown command ${cmd}\n${usage}`);
  }
}

main(process.argv.slice(2)).catch((err: Error) => {
  process.stderr.write(`fulcrum: ${err.message}\n`);
  process.exit(2);
});
