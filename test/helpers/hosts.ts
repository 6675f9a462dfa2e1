/**
 * Hosts for tests: N Linux network namespaces on one bridge, each a "host" with its own address,
 * so multi-host behaviour (addresses that move, links that drop) runs for real on one machine.
 * Needs root and iproute2/iptables.
 *
 *   const net = await createHosts({ prefix: 'fhn', count: 3 });
 *   const [a, b] = net.hosts;                  // a.ip = 198.19.<n>.10, b.ip = 198.19.<n>.11
 *   const srv = b.spawn('socat', [...]);        // runs inside b's namespace, killed at teardown
 *   await a.exec('ping', ['-c1', b.ip]);        // runs to completion inside a's namespace
 *   const cp = a.fulcrum(['control-plane', ...]); // `fulcrum <args>` from the sources, on host a
 *   const w = watch(b.spawn(...));             // spawn + output()/kill()/stop()
 *   await a.linkDown(); await a.linkUp();       // a cut cable: carrier lost on a's only link
 *   await net.teardown();                       // kills every process in the namespaces, removes
 *                                               // namespaces, links and the iptables rule
 *   expect(await leftovers('fhn')).toEqual([]); // nothing of this prefix is left on the machine
 *
 * Names. Everything created carries `prefix`: namespaces `<prefix>-<name>`, root-side veth links
 * `<prefix>-<i>`, the bridge `<prefix>-br`, and one FORWARD rule on that bridge (dockerd sets the
 * FORWARD policy to DROP and bridged frames pass through iptables). createHosts first removes
 * whatever carries the prefix (a killed earlier run), so ONE PREFIX PER TEST FILE: two files that
 * share a prefix would tear each other down. Keep prefixes to 2-6 letters (links are <= 15 chars).
 * The same file run from two checkouts on one machine (a CI clone beside a worktree) shares its
 * prefix too: createHosts holds the prefix and the subnet host-wide (claimHosts) while its test
 * process lives, so a second run waits for the first instead of killing its processes.
 *
 * Addresses. Hosts sit in 198.18.0.0/15 (reserved for network tests) and treat all of it as
 * on-link, so addresses handed out from pools elsewhere in the range (say 198.18.100.0/24) reach
 * a host by ARP, as on a real LAN. Host i gets 198.19.<subnet>.<10+i>; the machine's root
 * namespace (where the test runs) gets 198.19.<subnet>.1/24 on the bridge so the test itself can
 * reach the hosts (e.g. a control plane's API). `subnet` defaults to a value derived from the
 * prefix; give different prefixes different subnets when several run at once.
 */
import { execFile, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import type { Server } from 'node:net';
import { join, resolve } from 'node:path';
import { hold } from './address-blocks.js';

const repoRoot = resolve(import.meta.dirname, '..', '..');
const cli = join(repoRoot, 'bin', 'fulcrum.js');

export interface ExecResult { code: number; stdout: string; stderr: string }

export interface Host {
  /** The name given in createHosts (or h<i>). */
  name: string;
  /** The network namespace's name. */
  ns: string;
  /** The host's address (no mask). */
  ip: string;
  /** The interface inside the host. */
  iface: 'eth0';
  /** Runs a command inside the host to completion (never throws on a non-zero exit). */
  exec(cmd: string, args: string[], opts?: { timeoutMs?: number; input?: string }): Promise<ExecResult>;
  /** Starts a long-running process inside the host; teardown kills it. */
  spawn(cmd: string, args: string[], opts?: SpawnOptions): ChildProcess;
  /** `fulcrum <args>` from the TypeScript sources inside the host, with stdout+stderr collected. */
  fulcrum(args: string[], env?: Record<string, string>): HostProcess;
  /** Takes the host's only link down (carrier lost inside the host: a cut cable). */
  linkDown(): Promise<void>;
  /** Brings the link back. */
  linkUp(): Promise<void>;
}

export interface HostProcess {
  proc: ChildProcess;
  output(): string;
  /** SIGKILL, and resolves once the process has exited. */
  kill(): Promise<void>;
  /** SIGTERM (a clean shutdown), and resolves with the exit code once it has exited. */
  stop(): Promise<number | null>;
}

export interface HostNet {
  prefix: string;
  bridge: string;
  hosts: Host[];
  /** The root namespace's address on the bridge (where the test process talks from). */
  rootIp: string;
  /** Kills every process in the namespaces, then removes namespaces, links and the rule. */
  teardown(): Promise<void>;
}

/** Runs a command in the root namespace; throws with its stderr unless `allowFail`. */
export async function sh(cmd: string, args: string[], allowFail = false, timeoutMs = 30_000): Promise<ExecResult> {
  return new Promise((ok, fail) => {
    execFile(cmd, args, { timeout: timeoutMs, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      if (code !== 0 && !allowFail) fail(new Error(`${cmd} ${args.join(' ')}: exit ${code}: ${stderr || err?.message}`));
      else ok({ code, stdout, stderr });
    });
  });
}

function checkPrefix(prefix: string): void {
  if (!/^[a-z][a-z0-9]{1,5}$/.test(prefix)) throw new Error(`host prefix ${JSON.stringify(prefix)}: 2-6 lowercase letters/digits`);
}

/** The subnet createHosts gives `prefix` when the caller names none. */
export function defaultSubnet(prefix: string): number {
  let h = 7;
  for (const c of prefix) h = (h * 31 + c.charCodeAt(0)) % 251;
  return h + 1;
}

async function namespacesOf(prefix: string): Promise<string[]> {
  const { stdout } = await sh('ip', ['netns', 'list'], true);
  return stdout.split('\n').map((l) => l.split(' ')[0]!).filter((n) => n.startsWith(`${prefix}-`));
}

async function linksOf(prefix: string): Promise<string[]> {
  const { stdout } = await sh('ip', ['-o', 'link', 'show'], true);
  return stdout.split('\n').map((l) => l.split(':')[1]?.trim().split('@')[0] ?? '').filter((n) => n.startsWith(`${prefix}-`));
}

async function rulesOf(prefix: string): Promise<string[]> {
  const { stdout } = await sh('iptables', ['-S', 'FORWARD'], true);
  return stdout.split('\n').filter((l) => l.includes(` ${prefix}-br `) || l.endsWith(` ${prefix}-br`));
}

async function pidsIn(ns: string): Promise<number[]> {
  const { stdout } = await sh('ip', ['netns', 'pids', ns], true);
  return stdout.split('\n').map(Number).filter((n) => Number.isInteger(n) && n > 0);
}

/**
 * What of `prefix` exists on the machine: namespaces, links, FORWARD rules, and processes inside
 * those namespaces. Empty after a teardown; tests assert that.
 */
export async function leftovers(prefix: string): Promise<string[]> {
  checkPrefix(prefix);
  const out: string[] = [];
  for (const ns of await namespacesOf(prefix)) {
    out.push(`netns ${ns}`);
    for (const pid of await pidsIn(ns)) out.push(`process ${pid} in ${ns}`);
  }
  for (const l of await linksOf(prefix)) out.push(`link ${l}`);
  for (const r of await rulesOf(prefix)) out.push(`rule ${r}`);
  return out;
}

/** Removes everything carrying `prefix` (processes in its namespaces first). Idempotent. */
export async function cleanHosts(prefix: string): Promise<void> {
  checkPrefix(prefix);
  for (const ns of await namespacesOf(prefix)) {
    for (let round = 0; round < 20; round++) {
      const pids = await pidsIn(ns);
      if (pids.length === 0) break;
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    await sh('ip', ['netns', 'del', ns], true);
  }
  for (const r of await rulesOf(prefix)) {
    // `-S` prints "-A FORWARD ..."; the same words after -D delete it.
    await sh('iptables', ['-D', ...r.split(' ').slice(1)], true);
  }
  // Deleting one end of a veth removes both; the bridge goes last.
  for (const l of (await linksOf(prefix)).sort((a, b) => (a.endsWith('-br') ? 1 : 0) - (b.endsWith('-br') ? 1 : 0))) {
    await sh('ip', ['link', 'del', l], true);
  }
}

/**
 * The JSON lines (probes, attempts) a watched process has printed so far. The text after the last
 * newline is a line still arriving through the pipe and is left for the next call: parsed now, it
 * would throw on half an object.
 */
export function printedJson<T>(p: HostProcess): T[] {
  const text = p.output();
  return text.slice(0, text.lastIndexOf('\n') + 1).split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as T);
}

/** Collects a spawned process's output and gives it kill/stop (what `fulcrum()` returns). */
export function watch(proc: ChildProcess): HostProcess {
  let out = '';
  proc.stdout?.on('data', (d) => (out = (out + String(d)).slice(-1_000_000)));
  proc.stderr?.on('data', (d) => (out = (out + String(d)).slice(-1_000_000)));
  const exited = new Promise<number | null>((r) => {
    if (proc.exitCode !== null || proc.signalCode !== null) r(proc.exitCode);
    else proc.once('exit', (code) => r(code));
  });
  return {
    proc,
    output: () => out,
    async kill() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      await exited;
    },
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      return exited;
    },
  };
}

/**
 * Builds `count` hosts (or one per entry of `names`) on a fresh bridge, after removing anything an
 * earlier run of this prefix left behind.
 */
export async function createHosts(opts: { prefix: string; count?: number; names?: string[]; subnet?: number }): Promise<HostNet> {
  const { prefix } = opts;
  checkPrefix(prefix);
  const names = opts.names ?? Array.from({ length: opts.count ?? 2 }, (_, i) => `h${i}`);
  if (names.length < 1 || names.length > 200) throw new Error('createHosts: 1..200 hosts');
  const subnet = opts.subnet ?? defaultSubnet(prefix);
  if (!Number.isInteger(subnet) || subnet < 0 || subnet > 255) throw new Error('createHosts: subnet 0..255');
  // Held before anything is cleaned: what carries the prefix then is a dead run's.
  await claimHosts(prefix, subnet);
  await cleanHosts(prefix);
  try {
    return await build(prefix, names, subnet);
  } catch (err) {
    // Half-built: the caller has no HostNet to tear down, so nothing may stay.
    await cleanHosts(prefix);
    throw err;
  }
}

/** How long createHosts waits for another run holding its prefix or subnet (a whole netns file takes 1-2 minutes). */
export const HOSTS_CLAIM_WAIT_MS = 180_000;

/** The claims this process holds, by name: kept until it ends (see claimHosts). */
const claimed = new Map<string, Server>();

/**
 * Holds a netns prefix and subnet host-wide for the rest of this process (abstract sockets, as
 * address-blocks.ts holds octets: the kernel drops them when the process ends or is killed; a
 * vitest worker runs one file). Another process holding either is a live run of a test with the
 * same prefix or subnet, most often the same file from another checkout: cleaning the prefix would
 * SIGKILL that run's control plane, agents and write loops mid-test (db-host-drain once saw every
 * process of its fleet die at once right after its drain, then no write for 60 s). So this waits
 * up to `waitMs` for that process to end, then fails naming both. Held past teardown, so that the
 * run's own check that nothing is left (`leftovers`) never sees the next run's hosts; within one
 * process it is held once (a second createHosts of a prefix cleans it as before).
 */
export async function claimHosts(prefix: string, subnet: number, waitMs = HOSTS_CLAIM_WAIT_MS): Promise<void> {
  const names = [`\0fulcrum-test-netns-prefix-${prefix}`, `\0fulcrum-test-netns-subnet-${subnet}`];
  const deadline = Date.now() + waitMs;
  for (;;) {
    const fresh: string[] = [];
    for (const n of names.filter((x) => !claimed.has(x))) {
      const server = await hold(n);
      if (!server) break;
      // The claim alone never keeps a test process running.
      server.unref();
      claimed.set(n, server);
      fresh.push(n);
    }
    if (names.every((n) => claimed.has(n))) return;
    // Half held: given back, so that two runs waiting for each other's half never both wait.
    for (const n of fresh) {
      await new Promise<void>((r) => claimed.get(n)!.close(() => r()));
      claimed.delete(n);
    }
    if (Date.now() > deadline) {
      throw new Error(`netns prefix ${prefix} or subnet 198.19.${subnet}.0/24 is held by another test run on this host (the same file from another checkout?) for over ${waitMs} ms; its hosts were left alone`);
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}

async function build(prefix: string, names: string[], subnet: number): Promise<HostNet> {
  const bridge = `${prefix}-br`;
  const rootIp = `198.19.${subnet}.1`;
  await sh('ip', ['link', 'add', bridge, 'type', 'bridge']);
  await sh('ip', ['addr', 'add', `${rootIp}/24`, 'dev', bridge]);
  await sh('ip', ['link', 'set', bridge, 'up']);
  await sh('iptables', ['-I', 'FORWARD', '-i', bridge, '-o', bridge, '-j', 'ACCEPT']);

  const hosts: Host[] = [];
  for (const [i, name] of names.entries()) {
    const ns = `${prefix}-${name}`;
    const link = `${prefix}-${i}`;
    const ip = `198.19.${subnet}.${10 + i}`;
    await sh('ip', ['netns', 'add', ns]);
    await sh('ip', ['link', 'add', link, 'type', 'veth', 'peer', 'name', `${link}p`]);
    await sh('ip', ['link', 'set', `${link}p`, 'netns', ns]);
    await sh('ip', ['-n', ns, 'link', 'set', `${link}p`, 'name', 'eth0']);
    await sh('ip', ['link', 'set', link, 'master', bridge]);
    await sh('ip', ['link', 'set', link, 'up']);
    await sh('ip', ['-n', ns, 'addr', 'add', `${ip}/15`, 'dev', 'eth0']);
    await sh('ip', ['-n', ns, 'link', 'set', 'eth0', 'up']);
    await sh('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
    // The root namespace's /24 is reachable on-link too (the host's /15 covers 198.19.<n>.1).
    const spawnIn = (cmd: string, args: string[], o: SpawnOptions = {}) =>
      spawn('ip', ['netns', 'exec', ns, cmd, ...args], { stdio: ['ignore', 'pipe', 'pipe'], ...o });
    hosts.push({
      name,
      ns,
      ip,
      iface: 'eth0',
      exec: (cmd, args, o = {}) =>
        new Promise((ok) => {
          const child = execFile('ip', ['netns', 'exec', ns, cmd, ...args], { timeout: o.timeoutMs ?? 30_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
            const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
            ok({ code, stdout, stderr });
          });
          if (o.input !== undefined) child.stdin?.end(o.input);
        }),
      spawn: spawnIn,
      fulcrum: (args, env = {}) =>
        watch(spawnIn(process.execPath, [cli, ...args], {
          cwd: repoRoot,
          env: { ...process.env, FULCRUM_FROM_SOURCE: '1', FULCRUM_LOG_LEVEL: process.env.FULCRUM_LOG_LEVEL ?? 'info', ...env },
        })),
      linkDown: async () => void (await sh('ip', ['link', 'set', link, 'down'])),
      linkUp: async () => void (await sh('ip', ['link', 'set', link, 'up'])),
    });
  }
  return { prefix, bridge, hosts, rootIp, teardown: () => cleanHosts(prefix) };
}
