import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, chmodSync, constants, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import type { Logger } from '../../lib/logger.js';
import { runsWith } from '../../lib/processes.js';
import { renderKeepalivedConfig, validateVrrpSettings, ALIVE_ANSWER_S, type VrrpSettings } from './keepalived-config.js';
import { AliveServer } from './alive-server.js';

/**
 * Runs the data plane's own keepalived (docs/multi-host.md): started with the data plane, given
 * the served addresses after every snapshot (rewrite + SIGHUP), restarted if it dies, stopped
 * (which hands the addresses to a peer at once) when the data plane stops. keepalived outlives a
 * SIGKILLed parent, so its liveness script checks this process and, once it is gone, stops
 * keepalived itself: the addresses move within about a second and nothing is left running.
 */
export interface KeepalivedOptions extends VrrpSettings {
  stateDir: string;
  logger: Logger;
  /** The keepalived binary (default: keepalived on PATH). */
  binary?: string;
  /** The curl binary the liveness script asks with (default: curl on PATH). */
  curl?: string;
  /** Whether traffic is served now (alive-server.ts); the event loop answering is the rest. */
  serving: () => boolean;
}

const NONLOCAL_BIND = '/proc/sys/net/ipv4/ip_nonlocal_bind';

/**
 * Lets listeners bind an address this host does not hold yet (a standby's warm listeners). The
 * setting is per network namespace; pair mode sets it itself (it needs the same privilege as
 * keepalived does) and refuses to start when it cannot.
 */
export function ensureNonlocalBind(logger: Logger, file = NONLOCAL_BIND): void {
  let current = '';
  try {
    current = readFileSync(file, 'utf8').trim();
  } catch (err) {
    throw new Error(`pair mode (--vrrp-interface) needs net.ipv4.ip_nonlocal_bind=1 and cannot read ${file}: ${(err as Error).message}`);
  }
  if (current === '1') return;
  try {
    writeFileSync(file, '1\n');
  } catch (err) {
    throw new Error(
      `pair mode (--vrrp-interface) needs net.ipv4.ip_nonlocal_bind=1 in this network namespace and could not set it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}): ` +
        'run `sysctl -w net.ipv4.ip_nonlocal_bind=1` as root, or run the data plane with CAP_NET_ADMIN',
    );
  }
  logger.info('set net.ipv4.ip_nonlocal_bind=1 so standby listeners can bind addresses held by a peer');
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** A process's start time in clock ticks since boot (/proc/<pid>/stat field 22). */
export function startTime(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(') ') + 2).split(' ')[19] ?? '';
}

async function waitGone(pid: number, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (!isAlive(pid)) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return !isAlive(pid);
}

/** An executable's absolute path on PATH (keepalived runs the script with a minimal environment). */
function onPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '/usr/bin:/bin').split(':')) {
    if (dir === '') continue;
    const full = join(dir, name);
    try {
      accessSync(full, constants.X_OK);
      return full;
    } catch {
      // Not in this folder.
    }
  }
  return undefined;
}

/** A Unix socket's path must fit sockaddr_un (108 bytes with its NUL). */
const MAX_SOCKET_PATH = 107;

export class Keepalived {
  private readonly dir: string;
  private readonly conf: string;
  private readonly pidFile: string;
  private readonly script: string;
  private readonly socket: string;
  private readonly alive: AliveServer;
  private child: ChildProcess | undefined;
  private addresses: readonly string[] = [];
  private written = '';
  private stopping = false;
  private restartTimer: NodeJS.Timeout | undefined;

  constructor(private readonly o: KeepalivedOptions) {
    validateVrrpSettings(o);
    this.dir = join(o.stateDir, 'vrrp');
    this.conf = join(this.dir, 'keepalived.conf');
    this.pidFile = join(this.dir, 'keepalived.pid');
    this.script = join(this.dir, 'dataplane-alive.sh');
    this.socket = join(this.dir, 'alive.sock');
    this.alive = new AliveServer({ path: this.socket, serving: o.serving, logger: o.logger });
  }

  /** Stops a keepalived an earlier run of this data plane left, then starts ours. */
  async start(addresses: readonly string[]): Promise<void> {
    const curl = this.o.curl ?? onPath('curl');
    if (curl === undefined) throw new Error('pair mode (--vrrp-interface) needs curl for its liveness check: install the curl package (docs/multi-host.md)');
    if (Buffer.byteLength(this.socket) > MAX_SOCKET_PATH) throw new Error(`--state is too long for pair mode: ${this.socket} must fit in ${MAX_SOCKET_PATH} bytes (a Unix socket's limit)`);
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    chmodSync(this.dir, 0o700);
    await this.stopLeftover();
    await this.alive.start();
    this.addresses = addresses;
    // Quoted for sh; state folders are the operator's paths, never a client's.
    const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
    writeFileSync(this.script, [
      '#!/bin/sh',
      '# Written by the Fulcrum data plane (docs/multi-host.md): succeeds while the data plane that',
      '# started this keepalived runs and answers that it serves; once it is gone, stops keepalived,',
      '# which gives up the addresses. A data plane that exists but does not answer in time only',
      '# fails the check (keepalived gives the addresses up and takes them again once it answers).',
      // The start time tells this process from a later one that reuses its pid.
      `started=$(sed 's/.*) //' /proc/${process.pid}/stat 2>/dev/null | cut -d' ' -f20)`,
      `if [ "$started" != "${startTime(process.pid)}" ]; then`,
      `  kill -TERM "$(cat ${q(this.pidFile)})" 2>/dev/null`,
      '  exit 1',
      'fi',
      `exec ${q(curl)} --fail --silent --output /dev/null --max-time ${ALIVE_ANSWER_S} --unix-socket ${q(this.socket)} http://dataplane/alive`,
      '',
    ].join('\n'), { mode: 0o700 });
    chmodSync(this.script, 0o700);
    this.writeConfig();
    try {
      await this.spawn();
    } catch (err) {
      await this.alive.stop();
      throw err;
    }
  }

  /** The served addresses changed: rewrite the file and have keepalived reload it. */
  update(addresses: readonly string[]): void {
    this.addresses = addresses;
    if (!this.writeConfig()) return;
    const pid = this.child?.pid;
    if (pid !== undefined && this.child!.exitCode === null) process.kill(pid, 'SIGHUP');
  }

  /** SIGTERM: keepalived sends a priority-0 advert and removes the addresses before exiting. */
  async stop(): Promise<void> {
    this.stopping = true;
    clearTimeout(this.restartTimer);
    const child = this.child;
    if (child?.pid && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(t);
    }
    // After keepalived: while it runs, a vanished socket would only fail its check.
    await this.alive.stop();
  }

  private writeConfig(): boolean {
    const text = renderKeepalivedConfig({ ...this.o, addresses: this.addresses, checkScript: this.script, scriptUser: userInfo().username });
    if (text === this.written) return false;
    writeFileSync(this.conf, text, { mode: 0o600 });
    this.written = text;
    return true;
  }

  private async stopLeftover(): Promise<void> {
    if (!existsSync(this.pidFile)) return;
    const pid = Number(readFileSync(this.pidFile, 'utf8').trim());
    if (!Number.isInteger(pid) || pid <= 1 || !runsWith(pid, this.conf)) return;
    this.o.logger.warn({ pid }, 'stopping the keepalived an earlier run left');
    process.kill(pid, 'SIGTERM');
    if (!(await waitGone(pid, 5_000))) process.kill(pid, 'SIGKILL');
  }

  private spawn(): Promise<void> {
    const args = ['--dont-fork', '--log-console', '--log-detail', '--vrrp', '-f', this.conf, '-p', this.pidFile, '-r', join(this.dir, 'vrrp.pid')];
    const child = spawn(this.o.binary ?? 'keepalived', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = child;
    const log = this.o.logger;
    const onLine = (chunk: Buffer) => {
      for (const line of String(chunk).split('\n').filter(Boolean)) {
        // State changes are what an operator looks for; the rest is keepalived's chatter.
        if (/STATE|priority 0|Stopped|error/i.test(line)) log.info({ keepalived: line.replace(/^.*?: /, '') }, 'vrrp');
        else log.debug({ keepalived: line }, 'vrrp');
      }
    };
    child.stdout!.on('data', onLine);
    child.stderr!.on('data', onLine);
    child.on('exit', (code, signal) => {
      if (this.stopping) return;
      log.error({ code, signal }, 'keepalived exited; restarting in 1 s');
      this.restartTimer = setTimeout(() => void this.spawn().catch((err: Error) => log.error({ err }, 'could not restart keepalived')), 1_000);
    });
    return new Promise((resolve, reject) => {
      child.once('spawn', () => resolve());
      child.once('error', (err: NodeJS.ErrnoException) => {
        // Never started: no restart loop; the caller refuses to start or logs.
        this.stopping = true;
        reject(new Error(err.code === 'ENOENT' ? 'pair mode (--vrrp-interface) needs keepalived: install the keepalived package (docs/multi-host.md)' : `keepalived: ${err.message}`));
      });
    });
  }
}
