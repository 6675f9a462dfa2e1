/**
 * Attack (docs/security/mysql.md, "Client tools run as the node, and the agent writes nothing
 * through a node's links"): SQL replayed by a restore, a fork or a dump seeding is run by the
 * engine's client (`mariadb`), and the SQL can make that client act on the host:
 * `LOAD DATA LOCAL INFILE` reads a file where the client runs, `system` (`\!`) runs a command.
 * Before the fix the process runtime ran every tool as the agent's own uid (root), so a backup's
 * SQL could read the agent's mTLS key or desired.json; the docker runtime ran them as root inside
 * the container. Now both run them as the node's uid (docker: in the node's container). And a
 * node uid, which owned its conf folder and owns its run folder, could plant links there that
 * the agent (root) followed when it next wrote, chowned or chmodded them before a start: the
 * agent now writes the node's files without following links, and keeps conf/ its own.
 * The real runtime adapters and a real server run here; the attacks are performed as the node's
 * uid (the test runs as root, as the agent does).
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectLocalCatalogue } from '../../agent/catalogue.js';
import { LABEL_AGENT, LABEL_DATABASE, LABEL_MANAGED, LABEL_NODE, type ContainerRuntime, type NodeSpec } from '../../agent/runtime/container-runtime.js';
import { detectDockerCatalogue } from '../../agent/runtime/docker-catalogue.js';
import { createDockerRuntime } from '../../agent/runtime/docker-runtime.js';
import { NODE_UID_BASE, existingNodeGroupId } from '../../agent/runtime/node-user.js';
import { createProcessRuntime } from '../../agent/runtime/process-runtime.js';
import { silentLogger } from '../../lib/logger.js';
import { freePort } from '../helpers/tcp.js';

const cases = [
  { runtime: 'process' as const, db: 971, host: '127.163.0.1' },
  { runtime: 'docker' as const, db: 972, host: '127.163.0.2' },
];

/** Runs `sql` through the node's own `mariadb`, as a restore does (runtime.exec, stdin). */
function client(rt: ContainerRuntime, name: string, sql: string, extra: string[] = []) {
  return rt.exec(name, ['mariadb', '--user=root', ...extra], { stdin: Readable.from([sql]) });
}

describe.each(cases)('security: client tools run as the node ($runtime runtime)', ({ runtime, db, host }) => {
  const tmp = mkdtempSync(join(tmpdir(), 'fulcrum-uidtools-'));
  const name = `fulcrum-uidtools-${runtime}-n1`;
  const nodeUid = NODE_UID_BASE + db;
  let rt: ContainerRuntime;
  let spec: NodeSpec;
  // A root-only file somewhere on the host, in a folder anyone may search (like /etc/shadow).
  const open = join(tmp, 'open');
  const marker = join(open, 'marker');
  const secret = `agent-secret-${process.pid}-${Date.now()}`;

  beforeAll(async () => {
    expect(process.getuid?.()).toBe(0);
    mkdirSync(open, { mode: 0o755 });
    chmodSync(tmp, 0o755);
    writeFileSync(marker, `${secret}\n`, { mode: 0o600 });
    const engine = runtime === 'docker'
      ? await detectDockerCatalogue().then((c) => c[0] && { id: c[0].id, version: c[0].version, image: c[0].image })
      : await detectLocalCatalogue().then((c) => c[0] && { id: c[0].id, version: c[0].version, binary: c[0].binary });
    if (!engine) throw new Error(`no ${runtime} engine on this host`);
    const root = join(tmp, 'runtime');
    rt = runtime === 'docker' ? createDockerRuntime({ root, logger: silentLogger() }) : createProcessRuntime({ root, logger: silentLogger() });
    spec = {
      name,
      labels: { [LABEL_MANAGED]: 'true', [LABEL_AGENT]: 'uid-tools', [LABEL_DATABASE]: String(db), [LABEL_NODE]: '1' },
      engine,
      dataDir: join(tmp, 'data', name),
      config: '[mysqld]\nskip_name_resolve=ON\ninnodb_buffer_pool_size=32M\n',
      files: { 'server-key.pem': 'KEY of {{DATA_DIR}}\n' },
      host,
      port: await freePort(host),
      memoryMb: 512,
      cpus: 1,
    };
    await rt.ensure(spec, { timeoutMs: 120_000 });
  }, 240_000);

  afterAll(async () => {
    await rt?.remove(name, { withData: true }).catch(() => undefined);
    await rt?.close();
    rmSync(tmp, { recursive: true, force: true });
  });

  it("a tool runs as the node's uid, and in the node's container on docker", async () => {
    // `system` runs a command from the SQL stream, as any replayed backup could.
    const r = await client(rt, name, 'SELECT 1;\nsystem echo "uid=$(id -u)"\nsystem echo "pid1=$(cat /proc/1/comm)"\n');
    expect(r.exitCode, r.stderr).toBe(0);
    expect(Number(/^uid=(\d+)$/m.exec(r.stdout)?.[1])).toBe(nodeUid);
    const pid1 = /^pid1=(.*)$/m.exec(r.stdout)?.[1];
    // On docker the tool shares the server's pid namespace: its pid 1 is the server itself.
    if (runtime === 'docker') expect(pid1).toMatch(/mariadbd|mysqld/);
  });

  it('LOAD DATA LOCAL INFILE in replayed SQL cannot read a root-only file: node.json, or any of the host', async () => {
    // node.json (0600, the agent's) holds the node's spec with its keys; the container sees it
    // at /fulcrum. The marker stands for any root-only file of the host.
    const targets = runtime === 'docker'
      ? ['/fulcrum/node.json']
      : [join(tmp, 'runtime', 'nodes', name, 'node.json'), marker];
    const sql = [
      'SET GLOBAL local_infile=1;',
      'CREATE DATABASE IF NOT EXISTS exfil;',
      'CREATE TABLE IF NOT EXISTS exfil.loot (line TEXT);',
    ];
    const c = await mysql.createConnection({ socketPath: (await rt.connection(name)).socketPath, user: 'root', password: '' });
    try {
      for (const target of targets) {
        // --local-infile=1: this layer must hold even for a client that allows it.
        const r = await client(rt, name, [...sql, `LOAD DATA LOCAL INFILE '${target}' INTO TABLE exfil.loot;`].join('\n'), ['--local-infile=1']);
        const [rows] = await c.query('SELECT line FROM exfil.loot');
        expect(JSON.stringify(rows)).not.toContain(secret);
        expect(JSON.stringify(rows)).not.toContain('server-key.pem');
        // Refused where it was attempted: the client could not open the file.
        expect(r.exitCode).not.toBe(0);
        expect(r.stderr).toMatch(/Errcode: 13|Permission denied/i);
      }
    } finally {
      await c.query('SET GLOBAL local_infile=0').catch(() => undefined);
      await c.end();
    }
  });

  it("a node uid's links where the agent writes before a start are not followed: the victims are unchanged", async () => {
    const hp = { nodeDir: join(tmp, 'runtime', 'nodes', name) };
    const conf = join(hp.nodeDir, 'conf');
    const run = join(hp.nodeDir, 'run');
    const victimFile = join(open, 'victim-file');
    const victimDir = join(open, 'victim-dir');
    const victimFile2 = join(open, 'victim-file-2');
    writeFileSync(victimFile, 'VICTIM\n', { mode: 0o600 });
    writeFileSync(victimFile2, 'VICTIM 2\n', { mode: 0o600 });
    mkdirSync(victimDir, { mode: 0o751 });
    chmodSync(victimDir, 0o751);
    // The node's uid plants links in every folder of its node it can write, where it sees them:
    // on the host (process runtime), in its container (docker: /fulcrum is the node folder; the
    // links name host paths, which is where the agent would resolve them). The node keeps running:
    // the restart below (a changed spec) is when the agent writes.
    const planted = [
      `rm -f CONF/server-key.pem; ln -s ${victimFile} CONF/server-key.pem`,
      // The process runtime's server has its tmpdir there; docker's has none (planted all the same).
      `rm -rf RUN/tmp; ln -s ${victimDir} RUN/tmp`,
      `rmdir RUN/no-files; ln -s ${victimDir} RUN/no-files`,
    ].join('; ');
    if (runtime === 'docker') {
      await rt.exec(name, ['sh', '-c', planted.replaceAll('CONF', '/fulcrum/conf').replaceAll('RUN', '/fulcrum/run')], { noSocket: true });
    } else {
      spawnSync('sh', ['-c', planted.replaceAll('CONF', conf).replaceAll('RUN', run)], { uid: nodeUid, gid: existingNodeGroupId()!, encoding: 'utf8' });
    }
    expect(lstatSync(join(run, 'no-files')).isSymbolicLink()).toBe(true);
    // The node's uid could at least plant in run/; an older agent gave it conf/ too, so a link
    // there may predate this agent: planted as root, as if left from then.
    spawnSync('sh', ['-c', `ln -s ${victimFile2} ${conf}/stale.pem`]);
    spec = { ...spec, files: { ...spec.files, 'stale.pem': 'STALE\n' } };
    await rt.ensure(spec, { timeoutMs: 120_000 }).catch(() => undefined);

    expect(readFileSync(victimFile, 'utf8')).toBe('VICTIM\n');
    expect(readFileSync(victimFile2, 'utf8')).toBe('VICTIM 2\n');
    for (const f of [victimFile, victimFile2]) {
      expect(statSync(f).uid).toBe(0);
      expect(statSync(f).mode & 0o7777).toBe(0o600);
    }
    expect(statSync(victimDir).uid).toBe(0);
    expect(statSync(victimDir).gid).toBe(0);
    expect(statSync(victimDir).mode & 0o7777).toBe(0o751);
  });

  it('the node still starts and reads its files as written', async () => {
    await rt.ensure(spec, { timeoutMs: 120_000 });
    expect((await rt.inspect(name)).state).toBe('running');
    const conf = join(tmp, 'runtime', 'nodes', name, 'conf');
    // Read as the server reads them: as the node's uid, where the node sees them.
    const seen = runtime === 'docker' ? '/fulcrum/conf' : conf;
    const r = await client(rt, name, `system cat ${seen}/server-key.pem ${seen}/stale.pem\n`);
    expect(r.stdout).toMatch(/^KEY of .*\nSTALE\n$/);
    // The node's own files (no other database's uid reads them) in a folder that is the agent's.
    for (const f of ['server-key.pem', 'stale.pem']) {
      expect(statSync(join(conf, f)).uid).toBe(nodeUid);
      expect(statSync(join(conf, f)).mode & 0o777).toBe(0o600);
    }
    expect(statSync(conf).uid).toBe(0);
    expect(statSync(conf).mode & 0o777).toBe(0o710);
  });
});
