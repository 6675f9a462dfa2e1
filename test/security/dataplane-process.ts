import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SnapshotInput } from '../../dataplane/config/validate.js';
import { waitFor } from '../helpers/backends.js';
import { freePort } from '../helpers/tcp.js';

/**
 * A real data plane process (`node bin/fulcrum.js dataplane`, from the sources) serving a
 * snapshot written where it persists its last good one, so no control plane is needed: it
 * serves the file at start and keeps retrying a control-plane address nobody listens on.
 * `nofile` starts it under `prlimit` with that open-file limit (and asks it not to raise it).
 * `inside` runs it in a network namespace of the test's (netns-peer.ts): started through `run`,
 * its /metrics read through `text`, since the test's own sockets cannot reach inside.
 */
export interface DataplaneProcess {
  readonly pid: number;
  readonly metricsPort: number;
  /** Its state folder (`fulcrum dataplane reload --state` takes it). */
  readonly stateDir: string;
  /** The /metrics text. */
  metrics(): Promise<string>;
  /** One sample's value, or undefined. `labels` as they appear, e.g. `reason="client_cap"`. */
  metric(name: string, labels?: string): Promise<number | undefined>;
  /** stderr and stdout so far (for failure messages). */
  output(): string;
  stop(): Promise<void>;
}

export interface Inside {
  run(cmd: string, args: string[]): [string, string[]];
  text(url: string): Promise<string>;
}

export async function startDataplaneProcess(snapshot: SnapshotInput, opts: { nofile?: number; flags?: string[]; inside?: Inside } = {}): Promise<DataplaneProcess> {
  const stateDir = mkdtempSync(join(tmpdir(), 'fulcrum-sec-dp-'));
  const id = 'sec-dp';
  writeFileSync(join(stateDir, `dataplane-${id}.json`), JSON.stringify(snapshot), { mode: 0o600 });
  const args = [
    join(process.cwd(), 'bin', 'fulcrum.js'), 'dataplane', '--id', id, '--state', stateDir,
    // Nobody listens there: plain gRPC, explicitly, as no certificate could be checked anyway.
    '--control-plane', `127.0.0.1:${await freePort()}`, '--insecure-grpc', '--metrics-port', '0',
    ...(opts.nofile ? ['--nofile', String(opts.nofile)] : []),
    // One process unless the caller asks for workers: these tests count per process.
    ...(opts.flags?.includes('--workers') ? [] : ['--workers', '1']), ...(opts.flags ?? []),
  ];
  const [plainCmd, plainArgv] = opts.nofile
    ? ['prlimit', [`--nofile=${opts.nofile}:${opts.nofile}`, process.execPath, ...args]]
    : [process.execPath, args];
  const [cmd, argv] = opts.inside ? opts.inside.run(plainCmd, plainArgv as string[]) : [plainCmd, plainArgv];
  const child: ChildProcess = spawn(cmd, argv as string[], {
    env: { ...process.env, FULCRUM_FROM_SOURCE: '1', FULCRUM_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out = (out + d.toString()).slice(-20_000)));
  child.stderr!.on('data', (d: Buffer) => (out = (out + d.toString()).slice(-20_000)));
  let exited = false;
  const exit = new Promise<void>((resolve) => child.once('exit', () => {
    exited = true;
    resolve();
  }));
  const info = join(stateDir, 'dataplane.json');
  let started: { pid: number; metricsPort: number } | undefined;
  try {
    await waitFor(() => {
      if (exited) throw new Error(`data plane exited: ${out}`);
      if (!existsSync(info)) return false;
      // The CLI writes the file in place: it may exist before its content does.
      try {
        started = JSON.parse(readFileSync(info, 'utf8')) as { pid: number; metricsPort: number };
      } catch {
        return false;
      }
      return true;
    }, 60_000, 'data plane started');
  } catch (e) {
    child.kill('SIGKILL');
    throw e;
  }
  const { pid, metricsPort } = started!;
  const url = `http://127.0.0.1:${metricsPort}/metrics`;
  const metrics = async () => (opts.inside ? opts.inside.text(url) : (await fetch(url)).text());
  return {
    pid,
    metricsPort,
    stateDir,
    metrics,
    async metric(name, labels) {
      const text = await metrics();
      for (const line of text.split('\n')) {
        if (!line.startsWith(name)) continue;
        const rest = line.slice(name.length);
        if (labels === undefined ? !/^[ {]/.test(rest) : !rest.startsWith('{') || !rest.includes(labels)) continue;
        return Number(line.slice(line.lastIndexOf(' ') + 1));
      }
      return undefined;
    },
    output: () => out,
    async stop() {
      if (!exited) {
        child.kill('SIGTERM');
        const t = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exit;
        clearTimeout(t);
      }
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}
