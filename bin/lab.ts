/**
 * `fulcrum lab`: the whole product on one machine. Starts the control plane, one data plane and
 * one agent as child processes (so that each can be killed and restarted on its own, as in a
 * real install), waits until the API answers, writes <state>/lab.json for scripts and tests,
 * prints how to point clients at it, and stops everything on Ctrl-C.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { join, resolve } from 'node:path';
import { ensureLabTls, type LabTls } from './lab-tls.js';
import { labIpv6Prefix, prepareLabIpv6, releaseLabIpv6 } from './lab-ipv6.js';
import { withDataplaneHeapFlags } from '../lib/node-flags.js';
import { sayOnStderr } from '../lib/logger.js';
import { makePrivate, restrictUmask } from '../lib/private-files.js';

/** Where the lab's data plane dials database members from (beside the 127.77/78/79 pools). */
const LAB_ENDPOINT_SOURCE = '127.76.0.1';

export interface LabOptions {
  state?: string;
  'api-port'?: number;
  'api-host'?: string;
  runtime?: string;
  /** Serve the API over HTTPS with a certificate of a lab CA (default: plain HTTP on loopback). */
  'api-tls'?: boolean;
  'api-rate-limit'?: number;
  'api-ip-rate-limit'?: number;
  'api-stats-rate-limit'?: number;
  /** Plain HTTP on a non-loopback --api-host (the control plane refuses it otherwise). */
  'api-insecure-listen'?: boolean;
}

/**
 * The lab's control-plane settings beyond its ports (docs/security/api.md): backends may be on
 * loopback (the lab's whole point), but never the agent's database nodes (127.79/16, the agent's
 * default pool) nor the lab's own pools and listeners, which the control plane always refuses.
 */
function labControlPlaneArgs(opts: LabOptions, tls: LabTls | undefined, ipv6Pool: string | undefined): string[] {
  const args = ['--backend-networks', '0.0.0.0/0,127.0.0.0/8', '--backend-exclude', '127.79.0.0/16', '--metrics-port', '0'];
  if (ipv6Pool) args.push('--nodebalancer-ipv6-pool', ipv6Pool);
  if (tls) args.push('--api-cert', tls.certFile, '--api-key', tls.keyFile);
  if (opts['api-insecure-listen']) args.push('--api-insecure-listen');
  for (const f of ['api-rate-limit', 'api-ip-rate-limit', 'api-stats-rate-limit'] as const) {
    if (opts[f] !== undefined) args.push(`--${f}`, String(opts[f]));
  }
  return args;
}

interface Child {
  name: string;
  proc: ChildProcess;
}

function spawnChild(name: string, args: string[], logDir: string): Child {
  const node = args[0] === 'dataplane' ? withDataplaneHeapFlags(process.execArgv) : process.execArgv;
  const proc = spawn(process.execPath, [...node, process.argv[1]!, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, FULCRUM_LAB: '1' },
  });
  logOutput(proc, join(logDir, `${name}.log`), name);
  return { name, proc };
}

/**
 * Appends a lab child's stdout and stderr to `file`. A log that cannot be written (a full disk)
 * is said once (`say`: the lab's stderr) and the child's output is dropped from then on: an 'error'
 * with no listener would end the lab, and output no longer read would block the child on a full
 * pipe.
 */
export function logOutput(proc: ChildProcess, file: string, name: string, say: (text: string) => void = sayOnStderr): void {
  const log = createWriteStream(file, { flags: 'a', mode: 0o600 });
  proc.stdout!.pipe(log);
  proc.stderr!.pipe(log);
  // After pipe()'s own listeners (prepended), which unpipe and pause the outputs.
  let failed = false;
  log.on('error', (err) => {
    if (failed) return;
    failed = true;
    say(`lab: ${name}'s log ${file} cannot be written (${err.message}); its output is dropped from now on\n`);
    proc.stdout!.resume();
    proc.stderr!.resume();
  });
}

async function waitFor<T>(what: string, fn: () => T | undefined | Promise<T | undefined>, child: Child, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.proc.exitCode !== null) throw new Error(`${child.name} exited with code ${child.proc.exitCode} while waiting for ${what}`);
    const v = await fn();
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/**
 * `--join <token>` for a host whose state folder has no certificate yet: the lab asks its own API
 * for a one-time token, so its data plane and agent join over the real bootstrap path (mutual
 * TLS, docs/security/grpc.md); later starts reuse the certificate they keep.
 */
async function joinFlags(apiUrl: string, adminToken: string, stateDir: string, role: 'dataplane' | 'agent', id: string, caFile?: string): Promise<string[]> {
  if (existsSync(join(stateDir, 'pki', 'host.crt'))) return [];
  const { status, body } = await postJson(`${apiUrl}/v4/fulcrum/join-tokens`, adminToken, { role, id, region: '*' }, caFile);
  const token = (body as { token?: string } | undefined)?.token;
  if (status !== 200 || !token) throw new Error(`could not create a join token for ${role} ${id}: ${status} ${JSON.stringify(body)}`);
  return ['--join', token];
}

/** A JSON POST over http or https; with --api-tls the API's certificate is the lab CA's. */
function postJson(url: string, bearer: string, payload: unknown, caFile?: string): Promise<{ status: number; body: unknown }> {
  const data = JSON.stringify(payload);
  const u = new URL(url);
  const send = u.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolvePost, reject) => {
    const req = send(
      u,
      {
        method: 'POST',
        headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) },
        ...(caFile ? { ca: readFileSync(caFile) } : {}),
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        // An answer cut midway (the control plane stopped) would otherwise wait for its end for good.
        res.on('error', reject);
        res.on('data', (c: string) => (text += c));
        res.on('end', () => {
          let body: unknown = text;
          try {
            body = JSON.parse(text);
          } catch {
            // not JSON: report the text
          }
          resolvePost({ status: res.statusCode ?? 0, body });
        });
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

function readJson(path: string): any {
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch {
    return undefined;
  }
}

/** A child's <name>.json once the child has written it (the pid is this run's child). */
function ownFile<T>(path: string, child: Child): T | undefined {
  const j = readJson(path);
  return j && j.pid === child.proc.pid ? (j as T) : undefined;
}

export async function runLab(opts: LabOptions): Promise<void> {
  const state = resolve(opts.state ?? '.fulcrum-lab');
  const apiHost = opts['api-host'] ?? '127.0.0.1';
  const apiPort = opts['api-port'] ?? 8080;
  const runtime = opts.runtime ?? 'process';
  if (runtime !== 'process' && runtime !== 'docker') throw new Error('--runtime must be process or docker');
  const dirs = { cp: join(state, 'control-plane'), dp: join(state, 'dataplane'), agent: join(state, 'agent'), logs: join(state, 'logs') };
  // The lab's state (tokens, keys, logs) is private to its user (docs/security/secrets.md).
  restrictUmask();
  makePrivate(state);
  for (const d of Object.values(dirs)) mkdirSync(d, { recursive: true, mode: 0o700 });

  // A second start reuses the state; it also reuses the gRPC port so a data plane or agent
  // started by hand against the previous run finds the control plane again.
  const previous = readJson(join(state, 'lab.json'));
  const grpcPort = apiPort === 0 ? Number(previous?.grpcAddress?.split(':')[1] ?? 0) : apiPort + 1;
  // The join/renewal endpoint: fixed beside gRPC too, since hosts keep its port for renewals.
  const bootstrapPort = apiPort === 0 ? Number(previous?.bootstrapAddress?.split(':')[1] ?? 0) : apiPort + 2;
  rmSync(join(dirs.cp, 'control-plane.json'), { force: true });

  // NodeBalancers' IPv6 addresses come from a /64 of the lab's own, local on lo while it runs.
  const ipv6Range = labIpv6Prefix(state);
  const ipv6Off = prepareLabIpv6(ipv6Range);
  const ipv6Pool = ipv6Off === undefined ? ipv6Range : undefined;

  const children: Child[] = [];
  // A child killed by a signal has no exit code but a signal code: it has exited all the same
  // (waiting for its 'exit' again would leave the stop hanging until the event loop ran dry).
  const running = (c: Child) => c.proc.exitCode === null && c.proc.signalCode === null;
  const stopAll = async () => {
    for (const c of [...children].reverse()) if (running(c)) c.proc.kill('SIGTERM');
    await Promise.all(children.map((c) => (running(c) ? new Promise((r) => c.proc.once('exit', r)) : undefined)));
    if (ipv6Pool) releaseLabIpv6(ipv6Pool);
  };
  // However the supervisor ends, the route goes with it.
  if (ipv6Pool) process.once('exit', () => releaseLabIpv6(ipv6Pool));
  let stopping = false;
  const shutdown = () => {
    if (stopping) return;
    stopping = true;
    process.stdout.write('\nstopping the lab...\n');
    stopAll().then(() => process.exit(0));
  };
  process.on('SIGINT', shutdown);
  process.on('SIGTERM', shutdown);

  try {
    const tls = opts['api-tls'] ? ensureLabTls(join(dirs.cp, 'api-tls'), apiHost) : undefined;
    const cp = spawnChild('control-plane', ['control-plane', '--state', dirs.cp, '--api-host', apiHost, '--api-port', String(apiPort), '--grpc-port', String(grpcPort),
      '--bootstrap-port', String(bootstrapPort), ...labControlPlaneArgs(opts, tls, ipv6Pool)], dirs.logs);
    children.push(cp);
    const cpInfo = await waitFor('the control plane',
      () => ownFile<{ apiUrl: string; grpcAddress: string; bootstrapAddress: string; metricsUrl: string }>(join(dirs.cp, 'control-plane.json'), cp), cp);
    const adminToken = readFileSync(join(dirs.cp, 'admin-token'), 'utf8').trim();

    const dpJoin = await joinFlags(cpInfo.apiUrl, adminToken, dirs.dp, 'dataplane', 'lab-dataplane', tls?.caFile);
    const agentJoin = await joinFlags(cpInfo.apiUrl, adminToken, dirs.agent, 'agent', 'lab-agent', tls?.caFile);
    // The data plane serves the database endpoints and dials the members from its own loopback
    // address, the one they accept PROXY headers from (docs/security/mysql.md). One worker: on a
    // lab's few connections, roundrobin then visibly takes the nodes in turn (each worker keeps
    // its own rotation, docs/dataplane.md "Workers").
    const dp = spawnChild('dataplane', ['dataplane', '--id', 'lab-dataplane', '--region', '*', '--control-plane', cpInfo.grpcAddress, '--state', dirs.dp, '--workers', '1',
      '--metrics-port', '0', '--endpoint-source', LAB_ENDPOINT_SOURCE, ...dpJoin], dirs.logs);
    children.push(dp);
    const agent = spawnChild('agent', ['agent', '--id', 'lab-agent', '--region', '*', '--control-plane', cpInfo.grpcAddress, '--state', dirs.agent, '--runtime', runtime, '--metrics-port', '0', '--stop-nodes-on-exit', ...agentJoin], dirs.logs);
    children.push(agent);
    // Each child picks its own metrics port and names it in its file: a port picked here and
    // handed over could be taken by another socket before the child binds it.
    const dpInfo = await waitFor('the data plane', () => ownFile<{ metricsPort: number }>(join(dirs.dp, 'dataplane.json'), dp), dp);
    const agentInfo = await waitFor('the agent', () => ownFile<{ metricsPort: number }>(join(dirs.agent, 'agent.json'), agent), agent);

    const info = {
      apiUrl: cpInfo.apiUrl,
      consoleUrl: `${cpInfo.apiUrl}/console/`,
      grpcAddress: cpInfo.grpcAddress,
      bootstrapAddress: cpInfo.bootstrapAddress,
      adminToken,
      stateDir: state,
      ...(tls ? { apiCaFile: tls.caFile } : {}),
      metrics: {
        controlPlane: cpInfo.metricsUrl,
        dataplane: `http://127.0.0.1:${dpInfo.metricsPort}/metrics`,
        agent: `http://127.0.0.1:${agentInfo.metricsPort}/metrics`,
      },
      nodebalancerIpv6Pool: ipv6Pool ?? null,
      pids: { lab: process.pid, controlPlane: cp.proc.pid, dataplane: dp.proc.pid, agent: agent.proc.pid },
      logs: dirs.logs,
    };
    writeFileSync(join(state, 'lab.json'), JSON.stringify(info, null, 2), { mode: 0o600 });
    chmodSync(join(state, 'lab.json'), 0o600);
    const hostPort = cpInfo.apiUrl.replace(/^https?:\/\//, '');
    process.stdout.write(
      [
        'Fulcrum lab is running.',
        '',
        `  API:          ${cpInfo.apiUrl}/v4  (and /v4beta)`,
        `  Admin token:  ${adminToken}`,
        // The token rides in the fragment, which browsers never send: the page reads it into
        // session storage and drops it from the address bar (docs/console.md).
        `  Console:      ${cpInfo.apiUrl}/console/#token=${adminToken}`,
        `  State:        ${state}   (logs in ${dirs.logs}, details in ${join(state, 'lab.json')})`,
        ipv6Pool ? `  IPv6:         NodeBalancers get addresses of ${ipv6Pool} (local on lo until the lab stops)` : `  IPv6:         off (${ipv6Off}); NodeBalancers show ipv6 null`,
        '',
        'linode-cli:',
        `  export LINODE_CLI_API_HOST=${hostPort} LINODE_CLI_API_SCHEME=${tls ? 'https' : 'http'} LINODE_CLI_TOKEN=${adminToken}${tls ? ` REQUESTS_CA_BUNDLE=${tls.caFile}` : ''}`,
        'Terraform (linode provider) and linodego:',
        `  export LINODE_URL=${cpInfo.apiUrl} LINODE_API_VERSION=v4 LINODE_TOKEN=${adminToken}${tls ? ` LINODE_CA=${tls.caFile} SSL_CERT_FILE=${tls.caFile}` : ''}`,
        '@linode/api-v4: setToken(token) and an axios interceptor on baseRequest that rewrites',
        `  https://api.linode.com to ${cpInfo.apiUrl}${tls ? ` (and NODE_EXTRA_CA_CERTS=${tls.caFile})` : ''}`,
        '',
        'Press Ctrl-C to stop.',
        '',
      ].join('\n'),
    );
    for (const c of children) {
      c.proc.on('exit', (code, signal) => {
        if (!stopping) process.stdout.write(`${c.name} exited (${signal ?? code}); see ${join(dirs.logs, `${c.name}.log`)}\n`);
      });
    }
  } catch (err) {
    await stopAll();
    throw err;
  }
}
