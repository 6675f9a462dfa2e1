// Imports only node: modules, so that `node test/helpers/go-clients.ts` (Node 24 strips the types)
// can build the clients ahead of the tests: scripts/test-all.sh starts it in the background.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { alive } from './lab.js';

const repoRoot = resolve(import.meta.dirname, '..', '..');

/** The linodego release test/clients/linodego/go.mod pins (a test checks the two agree). */
export const LINODEGO_VERSION = 'v1.69.1';

/** The Go programs of ours under test/clients/ that the e2e tests run. */
export const GO_CLIENTS = ['linodego'] as const;
export type GoClient = (typeof GO_CLIENTS)[number];

const cacheRoot = () => join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'fulcrum');

/**
 * The Go environment of every build: module downloads and the build cache under
 * ~/.cache/fulcrum/go, so a second run on the same machine downloads and compiles nothing, and
 * nothing is written to the user's own GOPATH. Module cache files are left writable so that
 * the folder can be removed without chmod.
 */
export function goEnv(): NodeJS.ProcessEnv {
  const go = join(cacheRoot(), 'go');
  return {
    ...process.env,
    GOPATH: go, GOMODCACHE: join(go, 'pkg', 'mod'), GOCACHE: join(go, 'cache'), GOFLAGS: '-modcacherw',
    // A static binary: no C toolchain needed on the machine.
    CGO_ENABLED: '0',
  };
}

/** The `go` command: on PATH, else where the official tarball installs it. */
export function goBinary(): string {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (dir && existsSync(join(dir, 'go'))) return join(dir, 'go');
  }
  if (existsSync('/usr/local/go/bin/go')) return '/usr/local/go/bin/go';
  throw new Error('no `go` command: install Go 1.25 or newer (https://go.dev/dl/) to build the Go clients of the e2e tests');
}

function runGo(args: string[], cwd: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolvePromise, reject) => {
    const p = spawn(goBinary(), args, { cwd, env: goEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    p.stdout.on('data', (d) => (output += d));
    p.stderr.on('data', (d) => (output += d));
    p.once('error', reject);
    p.once('close', (code) => resolvePromise({ code, output }));
  });
}

/**
 * The binary of test/clients/<name>, built once per machine into ~/.cache/fulcrum/go/bin and
 * keyed by the hash of its sources (go.mod, go.sum, *.go), so a change or a new pin builds a new
 * one. A build in progress in another process (scripts/test-all.sh starts one early) is waited
 * for rather than repeated: its lock file holds its pid, and a lock whose process is gone is
 * taken over. The binary is renamed into place when complete, so a build cut short leaves
 * nothing that looks finished. A failure throws: a client that cannot be built fails its test.
 */
export async function ensureGoClient(name: GoClient): Promise<{ bin: string; seconds: number; cached: boolean }> {
  const started = Date.now();
  const dir = join(repoRoot, 'test', 'clients', name);
  const hash = createHash('sha256');
  for (const f of readdirSync(dir).filter((f) => f === 'go.mod' || f === 'go.sum' || f.endsWith('.go')).sort()) {
    hash.update(f).update('\0').update(readFileSync(join(dir, f))).update('\0');
  }
  const binDir = join(cacheRoot(), 'go', 'bin');
  const bin = join(binDir, `fulcrum-${name}-${hash.digest('hex').slice(0, 12)}`);
  const lock = `${bin}.lock`;
  mkdirSync(binDir, { recursive: true });
  const cached = existsSync(bin);
  while (!existsSync(bin)) {
    try {
      writeFileSync(lock, String(process.pid), { flag: 'wx' });
    } catch {
      const holder = Number(readFileSync(lock, 'utf8') || 0);
      if (holder && alive(holder)) {
        if (Date.now() - started > 20 * 60_000) throw new Error(`the build of ${name} by pid ${holder} did not finish in 20 minutes`);
        await new Promise((r) => setTimeout(r, 1000));
      } else {
        rmSync(lock, { force: true });
      }
      continue;
    }
    try {
      const tmp = `${bin}.${process.pid}.tmp`;
      const r = await runGo(['build', '-trimpath', '-o', tmp, '.'], dir).catch((err: Error) => ({ code: -1, output: err.message }));
      if (r.code !== 0) throw new Error(`building test/clients/${name} failed (exit ${r.code}):\n${r.output}`);
      renameSync(tmp, bin);
    } finally {
      rmSync(lock, { force: true });
    }
  }
  return { bin, seconds: (Date.now() - started) / 1000, cached };
}

// `node test/helpers/go-clients.ts`: build every client now (scripts/test-all.sh, in the background).
if (process.argv[1] && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  for (const name of GO_CLIENTS) {
    ensureGoClient(name).then(
      (r) => console.log(`go client ${name}: ${r.cached ? 'cached' : 'built'} in ${r.seconds.toFixed(1)} s (${r.bin})`),
      (err: Error) => {
        console.error(err.message);
        process.exitCode = 1;
      },
    );
  }
}
