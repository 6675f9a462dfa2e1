/**
 * `fulcrum lab`: the whole product on one machine. Starts the control plane, one data plane and
 * one agent as child processes (so that each can be killed and restarted on its own, as in a
 * real install), waits until the API answers, writes <state>/lab.json for scripts and tests,
 * prints how to point clients at it, and stops everything on Ctrl-C.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, mkdirSync, readFileSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { makePrivate, restrictUmask } from '../lib/private-files.js';

/** Asks the kernel for a free TCP port on host (for the children's /metrics endpoints). */
function freePort(host: string): Promise<number> {
  return new Promise((ok, fail) => {
    const srv = createServer();
    srv.once('error', fail);
    srv.listen(0, host, () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => ok(port));
    });
  });
}

export interface LabOptions {
  state?: string;
  'api-port'?: number;
  'api-host'?: string;
  runtime?: string;
}

interface Child {
  name: string;
  proc: ChildProcess;
}

function spawnChild(name: string, args: string[], logDir: string): Child {
  const log = createWriteStream(join(logDir, `${name}.log`), { flags: 'a', mode: 0o600 });
  const proc = spawn(process.execPath, [...process.execArgv, process.argv[1]!, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, FULCRUM_LAB: '1' },
  });
  proc.stdout!.pipe(log);
  proc.stderr!.pipe(log);
  return { name, proc };
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

function readJson(path: string): any {
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch {
    return undefined;
  }
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
  rmSync(join(dirs.cp, 'control-plane.json'), { force: true });

  const children: Child[] = [];
  const stopAll = async () => {
    for (const c of [...children].reverse()) if (c.proc.exitCode === null) c.proc.kill('SIGTERM');
    await Promise.all(children.map((c) => (c.proc.exitCode !== null ? undefined : new Promise((r) => c.proc.once('exit', r)))));
  };
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
    const cp = spawnChild('control-plane', ['control-plane', '--state', dirs.cp, '--api-host', apiHost, '--api-port', String(apiPort), '--grpc-port', String(grpcPort)], dirs.logs);
    children.push(cp);
    const cpInfo = await waitFor('the control plane', () => {
      const j = readJson(join(dirs.cp, 'control-plane.json'));
      return j && j.pid === cp.proc.pid ? (j as { apiUrl: string; grpcAddress: string }) : undefined;
    }, cp);
    const adminToken = readFileSync(join(dirs.cp, 'admin-token'), 'utf8').trim();

    const [dpMetrics, agentMetrics] = [await freePort('127.0.0.1'), await freePort('127.0.0.1')];
    const dp = spawnChild('dataplane', ['dataplane', '--id', 'lab-dataplane', '--region', '*', '--control-plane', cpInfo.grpcAddress, '--state', dirs.dp, '--metrics-port', String(dpMetrics)], dirs.logs);
    children.push(dp);
    const agent = spawnChild('agent', ['agent', '--id', 'lab-agent', '--region', '*', '--control-plane', cpInfo.grpcAddress, '--state', dirs.agent, '--runtime', runtime, '--metrics-port', String(agentMetrics), '--stop-nodes-on-exit'], dirs.logs);
    children.push(agent);
    await waitFor('the data plane', () => (readJson(join(dirs.dp, 'dataplane.json'))?.pid === dp.proc.pid ? true : undefined), dp);
    await waitFor('the agent', () => (readJson(join(dirs.agent, 'agent.json'))?.pid === agent.proc.pid ? true : undefined), agent);

    const info = {
      apiUrl: cpInfo.apiUrl,
      grpcAddress: cpInfo.grpcAddress,
      adminToken,
      stateDir: state,
      metrics: {
        controlPlane: `${cpInfo.apiUrl}/metrics`,
        dataplane: `http://127.0.0.1:${dpMetrics}/metrics`,
        agent: `http://127.0.0.1:${agentMetrics}/metrics`,
      },
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
        `  State:        ${state}   (logs in ${dirs.logs}, details in ${join(state, 'lab.json')})`,
        '',
        'linode-cli:',
        `  export LINODE_CLI_API_HOST=${hostPort} LINODE_CLI_API_SCHEME=http LINODE_CLI_TOKEN=${adminToken}`,
        'Terraform (linode provider) and linodego:',
        `  export LINODE_URL=${cpInfo.apiUrl} LINODE_API_VERSION=v4 LINODE_TOKEN=${adminToken}`,
        '@linode/api-v4: setToken(token) and an axios interceptor on baseRequest that rewrites',
        `  https://api.linode.com to ${cpInfo.apiUrl}`,
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
