// integration-lane: concurrent (fake servers and a nested vitest run in temp folders; servers counted by their own folders and owner tokens only).
import { spawn, execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { dbServers, OWNER_VAR, ownedServers, serversUnder } from '../helpers/db-servers.js';
import { repoRoot } from '../helpers/lab.js';
import { startFakeServer } from '../fixtures/leak-guard/fake-server.js';

const sh = promisify(execFile);

function gone(pid: number): boolean {
  return !dbServers().some((s) => s.pid === pid);
}

async function waitGone(pid: number): Promise<void> {
  const end = Date.now() + 10_000;
  while (!gone(pid) && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
}

/** The leak guard of every server-starting project (test/helpers/server-leak-guard.ts). */
describe('database server leak guard', () => {
  const dir = mkdtempSync(join(tmpdir(), 'leak-guard-'));
  const started: number[] = [];

  afterAll(() => {
    for (const pid of started) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('counts servers by their program, not client tools whose options name mysqld.sock', async () => {
    const server = startFakeServer(join(dir, 'a', 'data'));
    started.push(server);
    // A client tool as the agent starts it: its command line names the server's socket and datadir.
    const tool = spawn('/bin/sh', ['-c', 'sleep 60; :', `--socket=${dir}/a/run/mysqld.sock`, `--datadir=${dir}/a/data`], { argv0: 'mariadb-backup', stdio: 'ignore' });
    started.push(tool.pid!);
    const other = startFakeServer(join(tmpdir(), 'leak-guard-elsewhere', 'data'));
    started.push(other);
    await new Promise((r) => setTimeout(r, 200));
    expect(serversUnder(dir)).toEqual([server]);
    const seen = dbServers().find((s) => s.pid === server)!;
    expect(seen.datadir).toBe(join(dir, 'a', 'data'));
    expect(dbServers().some((s) => s.pid === tool.pid)).toBe(false);
    // The token is inherited: this file's guard owns both of its servers, and nothing else.
    const mine = process.env[OWNER_VAR]!;
    expect(mine).toMatch(/^\d+-[0-9a-f]{16}$/);
    expect(ownedServers(mine).map((s) => s.pid).sort()).toEqual([server, other].sort());
    // A server of another run (another token) is not this file's.
    const foreign = spawn('/bin/sh', ['-c', 'sleep 60; :', `--datadir=${dir}/b/data`], {
      argv0: 'mariadbd', stdio: 'ignore', env: { ...process.env, [OWNER_VAR]: 'another-run' },
    });
    started.push(foreign.pid!);
    await new Promise((r) => setTimeout(r, 200));
    expect(serversUnder(dir).sort()).toEqual([server, foreign.pid!].sort());
    expect(ownedServers(mine).map((s) => s.pid)).not.toContain(foreign.pid);
    expect(ownedServers('another-run').map((s) => s.pid)).toEqual([foreign.pid]);
    for (const pid of started.splice(0)) process.kill(pid, 'SIGKILL');
    for (const pid of [server, other, foreign.pid!]) await waitGone(pid);
    expect(ownedServers(mine)).toEqual([]);
  });

  it('fails a file that leaves a server running, names its folder and kills it; a file that stops its own in afterAll passes', async () => {
    const report = join(dir, 'report.json');
    const run = await sh(process.execPath, [join(repoRoot, 'node_modules', 'vitest', 'vitest.mjs'), 'run', '--config', 'test/fixtures/leak-guard/vitest.config.ts',
      '--reporter=json', `--outputFile=${report}`], { cwd: repoRoot, env: { ...process.env, LEAK_GUARD_DIR: dir }, timeout: 120_000 })
      .then(() => 0, (err: { code?: number }) => err.code ?? -1);
    expect(run).toBe(1);
    const r = JSON.parse(readFileSync(report, 'utf8')) as { testResults: { name: string; status: string; message: string }[] };
    const byFile = Object.fromEntries(r.testResults.map((t) => [t.name.split('/').pop(), t]));
    expect(byFile['tidy.fixture.ts']?.status).toBe('passed');
    expect(byFile['leaky.fixture.ts']?.status).toBe('failed');
    expect(byFile['leaky.fixture.ts']?.message).toContain(`database servers left running after this file's tests (now killed): ${dir}`);
    const leaked = Number(readFileSync(join(dir, 'leaky.pid'), 'utf8'));
    started.push(leaked);
    await waitGone(leaked);
    expect(gone(leaked)).toBe(true);
  }, 120_000);
});
