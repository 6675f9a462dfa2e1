import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from './lab.js';

/** The linode-cli release the e2e test runs; test/clients/linode-cli/requirements.txt pins it with its dependencies. */
export const LINODE_CLI_VERSION = '5.69.0';
const requirements = join(repoRoot, 'test', 'clients', 'linode-cli', 'requirements.txt');

export interface CommandResult { code: number | null; stdout: string; stderr: string }

/** Runs a command to its end and collects what it printed (stdin, when given, is written then closed). */
export function run(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv; input?: string } = {}): Promise<CommandResult> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    p.once('error', reject);
    p.once('close', (code) => resolve({ code, stdout, stderr }));
    p.stdin.end(opts.input ?? '');
  });
}

/**
 * A virtual environment holding the pinned linode-cli, made once per machine under
 * ~/.cache/fulcrum (or $XDG_CACHE_HOME/fulcrum) and keyed by the requirements file's hash, so a new
 * pin makes a new one. The `ok` file is written last: a half-made environment (an install cut
 * short) is removed and made again. Nothing is installed outside it. A failure throws: a client
 * that cannot be installed fails its test.
 */
export async function ensureLinodeCli(): Promise<{ bin: string; seconds: number; cached: boolean }> {
  const started = Date.now();
  const pins = readFileSync(requirements);
  const key = createHash('sha256').update(pins).digest('hex').slice(0, 12);
  const cacheRoot = join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'fulcrum');
  const venv = join(cacheRoot, `linode-cli-${LINODE_CLI_VERSION}-${key}`);
  const bin = join(venv, 'bin');
  const ok = join(venv, 'ok');
  const cached = existsSync(ok);
  if (!cached) {
    rmSync(venv, { recursive: true, force: true });
    mkdirSync(cacheRoot, { recursive: true });
    const steps: [string, string[]][] = [
      ['python3', ['-m', 'venv', venv]],
      [join(bin, 'python'), ['-m', 'pip', 'install', '--disable-pip-version-check', '--no-input', '-q', '-r', requirements]],
    ];
    for (const [cmd, args] of steps) {
      const r = await run(cmd, args).catch((err: Error) => ({ code: -1, stdout: '', stderr: err.message }));
      if (r.code !== 0) throw new Error(`installing linode-cli ${LINODE_CLI_VERSION} failed at \`${cmd} ${args.join(' ')}\` (exit ${r.code}):\n${r.stdout}${r.stderr}`);
    }
    writeFileSync(ok, `${LINODE_CLI_VERSION}\n`);
  }
  // A cached environment too has to hold the pinned client.
  const v = await run(join(bin, 'linode-cli'), ['--version']);
  if (v.code !== 0 || !v.stdout.includes(`v${LINODE_CLI_VERSION}`)) {
    throw new Error(`linode-cli in ${venv} is not ${LINODE_CLI_VERSION}: ${v.stdout}${v.stderr}`);
  }
  return { bin, seconds: (Date.now() - started) / 1000, cached };
}

/** The rows of a table linode-cli printed (its box-drawn table), as objects keyed by the header. */
export function parseTable(printed: string): Record<string, string>[] {
  const rows = printed.split('\n').filter((l) => l.startsWith('│')).map((l) => l.split('│').slice(1, -1).map((c) => c.trim()));
  const [header, ...body] = rows;
  if (!header) return [];
  return body.map((cells) => Object.fromEntries(header.map((h, i) => [h, cells[i] ?? ''])));
}
