import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api, startLab, until, type RunningLab } from '../helpers/lab.js';
import { ensureLinodeCli, LINODE_CLI_VERSION, parseTable, run } from '../helpers/linode-cli.js';
import { readmeBlock } from '../helpers/readme.js';

/** The block's commands: continued lines joined, comments dropped, each as a reader types it. */
function commands(block: string): string[] {
  return block.replace(/\\\n\s*/g, ' ').split('\n').map((l) => l.replace(/\s+#.*$/, '').trim()).filter((l) => l && !l.startsWith('#'));
}

/**
 * True when what linode-cli printed as JSON is our answer seen through its spec: it prints only
 * the keys its bundled spec knows (at any depth), and each of those must hold our exact value.
 */
function shownAsAnswered(cli: unknown, ours: unknown): boolean {
  if (Array.isArray(cli)) return Array.isArray(ours) && cli.length === ours.length && cli.every((v, i) => shownAsAnswered(v, ours[i]));
  if (cli && typeof cli === 'object') {
    if (!ours || typeof ours !== 'object' || Array.isArray(ours)) return false;
    return Object.entries(cli).every(([k, v]) => k in ours && shownAsAnswered(v, (ours as Record<string, unknown>)[k]));
  }
  return isDeepStrictEqual(cli, ours);
}

/** The README's linode-cli block word for word against a fresh lab, with the pinned linode-cli from PyPI. */
describe(`README quick start (linode-cli ${LINODE_CLI_VERSION})`, () => {
  let lab: RunningLab;
  let work: string;
  let bin: string;
  let cliEnv: Record<string, string>;
  const backends: Server[] = [];

  beforeAll(async () => {
    const venv = await ensureLinodeCli();
    bin = venv.bin;
    console.log(`linode-cli ${LINODE_CLI_VERSION} ready in ${venv.seconds.toFixed(1)} s (${venv.cached ? 'cached' : 'installed from PyPI'})`);
    lab = await startLab();
    work = mkdtempSync(join(tmpdir(), 'linode-cli-readme-'));
    // The backends the curl block starts before it: any HTTP servers on these addresses.
    for (const ip of ['127.0.100.1', '127.0.100.2']) {
      const s = createServer((_q, res) => res.end(`hello from ${ip}\n`));
      await new Promise<void>((resolve, reject) => s.once('error', reject).listen(8080, ip, resolve));
      backends.push(s);
    }
    // The `export` line the lab prints for linode-cli, as a reader pastes it; HOME is a fresh
    // folder so no configuration of this machine's user is read, and the table is wide enough
    // not to cut the short columns.
    const line = /export (LINODE_CLI_API_HOST=\S+ LINODE_CLI_API_SCHEME=\S+ LINODE_CLI_TOKEN=\S+)/.exec(lab.output());
    if (!line) throw new Error(`the lab printed no linode-cli export line:\n${lab.output()}`);
    cliEnv = Object.fromEntries(line[1]!.split(' ').map((kv) => kv.split('=') as [string, string]));
    cliEnv = { ...cliEnv, PATH: `${bin}:${process.env.PATH}`, HOME: work, COLUMNS: '200' };
  }, 400_000);

  afterAll(async () => {
    for (const s of backends) s.close();
    await lab?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  // No LINODE_* variable of the machine's own reaches the client: only the ones given here.
  const sh = (line: string, env: Record<string, string> = cliEnv, input?: string) => run('bash', ['-euo', 'pipefail', '-c', line], {
    cwd: work, input,
    env: { ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('LINODE_'))), ...env },
  });

  it('creates a NodeBalancer with two nodes that come UP and a database with its credentials and certificate', async () => {
    const call = api(`${lab.info.apiUrl}/v4`, lab.info.adminToken);
    const ours = async (path: string) => {
      const r = await call('GET', path);
      expect(r.status, path).toBe(200);
      return r.body as Record<string, unknown> & { data?: unknown[] };
    };
    // `--json` of a read command against our answer at `path`, asked again while a status changes
    // between the two reads (a node coming UP, a database becoming active).
    const sameJson = async (cmd: string, path: string, list: boolean) => {
      let last = '';
      await until(`${cmd} --json to show GET ${path}`, async () => {
        const r = await sh(`${cmd} --json`);
        expect(r.code, r.stdout + r.stderr).toBe(0);
        const printed = JSON.parse(r.stdout) as unknown[];
        const answer = await ours(path);
        last = `linode-cli printed ${r.stdout}\nwe answered ${JSON.stringify(answer)}`;
        expect(printed.length).toBeGreaterThan(0);
        return shownAsAnswered(printed, list ? answer.data : [answer]);
      }, 60_000, 500).catch((err: Error) => { throw new Error(`${err.message}\n${last}`); });
    };

    const ids: Record<string, string> = {};
    const nodeIds: string[] = [];
    const ran: string[] = [];
    for (const written of commands(readmeBlock('### With linode-cli'))) {
      const line = written.replace(/\b(NB_ID|CONFIG_ID|ENGINE_ID|DB_ID)\b/g, (p) => {
        if (!ids[p]) throw new Error(`${written}: no ${p} printed before it`);
        return ids[p]!;
      });
      const what = written.split(/\s+/).slice(1, 3).join(' ');
      ran.push(what);
      const once = async () => {
        const r = await sh(line);
        expect(r.code, `${line}\n${r.stdout}${r.stderr}`).toBe(0);
        return { rows: parseTable(r.stdout), printed: r.stdout };
      };
      switch (what) {
        case 'nodebalancers create': {
          const { rows: [row] } = await once();
          ids.NB_ID = row!.id!;
          const nb = await ours(`/nodebalancers/${ids.NB_ID}`);
          expect(row).toMatchObject({ label: 'first-nb-cli', region: 'us-east', ipv4: nb.ipv4, type: 'common' });
          expect(nb.label).toBe('first-nb-cli');
          await sameJson(`linode-cli nodebalancers view ${ids.NB_ID}`, `/nodebalancers/${ids.NB_ID}`, false);
          break;
        }
        case 'nodebalancers config-create': {
          const { rows: [row] } = await once();
          ids.CONFIG_ID = row!.id!;
          expect(row).toMatchObject({ port: '81', protocol: 'http', algorithm: 'roundrobin' });
          const path = `/nodebalancers/${ids.NB_ID}/configs/${ids.CONFIG_ID}`;
          expect(await ours(path)).toMatchObject({ port: 81, check: 'http', check_path: '/' });
          await sameJson(`linode-cli nodebalancers config-view ${ids.NB_ID} ${ids.CONFIG_ID}`, path, false);
          break;
        }
        case 'nodebalancers node-create': {
          const { rows: [row] } = await once();
          const label = /--label (\S+)/.exec(line)![1]!;
          const address = /--address (\S+)/.exec(line)![1]!;
          expect(row).toMatchObject({ label, address, weight: '50', mode: 'accept' });
          nodeIds.push(row!.id!);
          const path = `/nodebalancers/${ids.NB_ID}/configs/${ids.CONFIG_ID}/nodes/${row!.id}`;
          await sameJson(`linode-cli nodebalancers node-view ${ids.NB_ID} ${ids.CONFIG_ID} ${row!.id}`, path, false);
          break;
        }
        case 'nodebalancers nodes-list': {
          // "status UP for both": the reader runs it again until the health checks say so.
          const rows = await until('both nodes UP in nodes-list', async () => {
            const { rows } = await once();
            return rows.length === 2 && rows.every((r) => r.status === 'UP') && rows;
          }, 180_000, 1000);
          expect(rows.map((r) => [r.id, r.label, r.address])).toEqual([
            [nodeIds[0], 'web-1', '127.0.100.1:8080'], [nodeIds[1], 'web-2', '127.0.100.2:8080']]);
          await sameJson(line, `/nodebalancers/${ids.NB_ID}/configs/${ids.CONFIG_ID}/nodes`, true);
          break;
        }
        case 'databases engines': {
          const { rows } = await once();
          const engines = (await ours('/databases/engines')).data as { id: string; version: string }[];
          expect(rows.map((r) => [r.id, r.engine, r.version])).toEqual(engines.map((e) => [e.id, 'mysql', e.version]));
          ids.ENGINE_ID = rows[0]!.id!;
          await sameJson(line, '/databases/engines', true);
          break;
        }
        case 'databases mysql-create': {
          const { rows: [row] } = await once();
          ids.DB_ID = row!.id!;
          expect(row).toMatchObject({ label: 'first-db-cli', region: 'us-east', type: 'g6-nanode-1', cluster_size: '1', engine: 'mysql' });
          expect(`mysql/${row!.version}`).toBe(ids.ENGINE_ID);
          expect(await ours(`/databases/mysql/instances/${ids.DB_ID}`)).toMatchObject({ allow_list: ['127.0.0.0/8'] });
          break;
        }
        case 'databases mysql-view': {
          // "wait for status active": again until it says so.
          const row = await until('the database active in mysql-view', async () => {
            const { rows: [r] } = await once();
            return r?.status === 'active' && r;
          }, 300_000, 2000);
          expect(row).toMatchObject({ id: ids.DB_ID, label: 'first-db-cli' });
          await sameJson(line, `/databases/mysql/instances/${ids.DB_ID}`, false);
          break;
        }
        case 'databases mysql-creds-view': {
          const { rows: [row] } = await once();
          const creds = await ours(`/databases/mysql/instances/${ids.DB_ID}/credentials`);
          expect(row).toEqual({ username: creds.username, password: creds.password });
          await sameJson(line, `/databases/mysql/instances/${ids.DB_ID}/credentials`, false);
          break;
        }
        case 'databases mysql-ssl-cert': {
          const { rows: [row] } = await once();
          const { ca_certificate: ca } = await ours(`/databases/mysql/instances/${ids.DB_ID}/ssl`) as { ca_certificate: string };
          // The table cuts the long base64 line at the terminal's width and marks the cut with an ellipsis.
          const cell = row!.ca_certificate!.replace(/…$/, '');
          expect(cell.length).toBeGreaterThan(40);
          expect(ca.startsWith(cell)).toBe(true);
          expect(Buffer.from(ca, 'base64').toString()).toContain('-----BEGIN CERTIFICATE-----');
          await sameJson(line, `/databases/mysql/instances/${ids.DB_ID}/ssl`, false);
          break;
        }
        default:
          throw new Error(`the README's linode-cli block has a command this test does not check: ${written}`);
      }
    }
    expect(ran).toEqual(['nodebalancers create', 'nodebalancers config-create', 'nodebalancers node-create', 'nodebalancers node-create',
      'nodebalancers nodes-list', 'databases engines', 'databases mysql-create', 'databases mysql-view', 'databases mysql-creds-view',
      'databases mysql-ssl-cert']);
  }, 600_000);

  it('configures itself with `linode-cli configure --token` and then needs no environment', async () => {
    const home = mkdtempSync(join(work, 'home-'));
    const host = cliEnv.LINODE_CLI_API_HOST!;
    // The answers a reader types: the token; Enter for the default region, Linode type, image and
    // SSH user (this install offers no types or images); then a custom API target (this lab's
    // host, version and scheme), and no suppression of version warnings.
    const answers = [lab.info.adminToken, '', '', '', '', 'y', host, 'v4', 'http', 'n', ''].join('\n');
    const bare = { PATH: cliEnv.PATH!, HOME: home, COLUMNS: '200' };
    // configure reads /profile, /regions, ... before it asks for the API target, so it runs with
    // the lab's host and scheme (not its token) in the environment.
    const r = await sh('linode-cli configure --token', {
      ...bare, LINODE_CLI_API_HOST: host, LINODE_CLI_API_SCHEME: cliEnv.LINODE_CLI_API_SCHEME!,
    }, answers);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toContain('Configuring admin');
    expect(r.stdout).toContain('Active user is now admin');
    const file = join(home, '.config', 'linode-cli');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const config = readFileSync(file, 'utf8');
    expect(config).toContain(`api_host = ${host}`);
    expect(config).toContain(`token = ${lab.info.adminToken}`);

    // With only that file: no LINODE_CLI_* variables at all.
    const profile = await sh('linode-cli profile view --json', bare);
    expect(profile.code, profile.stdout + profile.stderr).toBe(0);
    const answer = (await api(`${lab.info.apiUrl}/v4`, lab.info.adminToken)('GET', '/profile')).body as { username: string };
    expect(answer.username).toBe('admin');
    expect(shownAsAnswered(JSON.parse(profile.stdout), [answer]), profile.stdout).toBe(true);
  }, 120_000);
});
