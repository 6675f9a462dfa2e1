// e2e-lane: concurrent (port 0, two address blocks of its own held host-wide (test/helpers/store-lab.ts: endpoints, nodes, the store's address), temp folders, process runtime only).
/**
 * Point-in-time forks built from the object store on another agent host than the one that wrote
 * the objects, through the real control plane and API (docs/databases.md, "Fork to a point in
 * time", "Placement with a shared object store"; the API has no in-place restore to a time:
 * today's clients restore to a point in time by forking, and an in-place restore takes a backup).
 *
 * Two `fulcrum agent` processes share one real S3-compatible store (Swift + s3api over TLS,
 * test/helpers/object-store.ts). A 1-node source on agent A gets rows every 100 ms through its
 * hosts.primary across several second boundaries, each stamped by the server with its statement
 * time. Agent A is then killed (its database's objects stay in the store), so the control plane
 * places two forks, to two different seconds T1 < T2, on agent B, which never ran the source.
 * Each holds exactly the source's rows stamped before its second (row count and checksum; every
 * row acknowledged before it, none sent at it or later), and the store's files hold no plaintext
 * of a row every fork restored. Agent A is killed (SIGKILL) in the middle of an upload: what it
 * leaves in the store is listed by no agent, and the forks are built beside it.
 */
import { randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { engineOfSeries } from '../../helpers/engines.js';
import { startRowWriter, type WrittenRow } from '../../helpers/row-writer.js';
import { startStoreLab, type StoreLab } from '../../helpers/store-lab.js';
import { MYSQL, connectFrom, until } from './db-lab.js';

const CLIENT = '127.64.0.2';
/** The agents' --binlog-archive-interval (seconds): how soon the archive reaches past T2. */
const ARCHIVE_S = 2;
const SUM = 'COUNT(*) AS n, COALESCE(SUM(CRC32(CONCAT(id, \':\', ts))), 0) AS c';

describe('point-in-time forks built from the object store on another agent host than the one that wrote it', () => {
  let lab: StoreLab;

  beforeAll(async () => {
    lab = await startStoreLab({ name: 'storefork', agents: 2, archiveS: ARCHIVE_S });
  }, 400_000);

  afterAll(async () => {
    await lab?.close();
  });

  it('forks to two seconds, placed on agent B from agent A\'s objects, hold exactly the rows stamped before each second', async () => {
    const { ok, agents, reader, waitStatus, credentials, connected } = lab;
    onTestFailed(() => console.log(lab.explain()));
    const engine = engineOfSeries((await ok('GET', '/v4/fulcrum/agents')).data.find((a: { id: string }) => a.id === agents[0]!.id).engines);
    const created = await ok('POST', MYSQL, { label: 'storefork-src', region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 1, allow_list: ['0.0.0.0/0'] });
    const src = await waitStatus(created.id, 'active');
    // A is whichever agent the source's member runs on; B is the other one.
    const member = Object.keys(src.members)[0]!;
    const a = agents.find((x) => member.startsWith(`${x.net}.`))!;
    const b = agents.find((x) => x !== a)!;
    expect(a).toBeDefined();
    const { password, ca } = await credentials(src.id);
    const connectSrc = () => connectFrom({ source: CLIENT, host: src.hosts.primary, port: 3306, user: 'linroot', password, ca });
    // A value that every fork must hold and the store's files must not (they are encrypted).
    const marker = `storefork-plaintext-${randomBytes(8).toString('hex')}`;
    const c = await until('the source through hosts.primary', () => connectSrc().catch(() => undefined), 120_000, 500);
    await c.query('CREATE DATABASE app');
    await c.query('CREATE TABLE app.t (id INT PRIMARY KEY, ts DECIMAL(17,6) NOT NULL)');
    await c.query('CREATE TABLE app.marker (v VARCHAR(64) NOT NULL)');
    await c.query('INSERT INTO app.marker VALUES (?)', [marker]);
    await c.end();
    // The first archive round takes a base; only after it can a second be restored.
    const oldest = await until('an oldest_restore_time', async () => (await ok('GET', `${MYSQL}/${src.id}`)).oldest_restore_time as string | null || undefined, 180_000, 500);
    // An agent that does not run the source builds a fork from a logical backup of it in the store
    // (docs/agent.md, "Forks on another agent of the store"): a snapshot before the writes.
    await ok('POST', `${MYSQL}/${src.id}/backups`, { label: 'before_rows' });
    await until('the snapshot listed', async () => ((await ok('GET', `${MYSQL}/${src.id}/backups`)).data as { label: string }[]).some((x) => x.label === 'before_rows') || undefined, 180_000, 500);

    const began = Math.max(Date.now(), Date.parse(oldest));
    const writer = startRowWriter({ connect: connectSrc, onError: 'fail' });
    const sent: readonly WrittenRow[] = writer.rows;
    // Two whole seconds inside the writes, each with writes before and after it.
    const T1 = (Math.floor(began / 1000) + 2) * 1000;
    const T2 = T1 + 2000;
    await writer.waitFor(() => Date.now() >= T2 + 3000 && sent.some((r) => r.ackMs < T1) && sent.some((r) => r.sentMs >= T2), 120_000, 'writes past T2');
    await writer.stop();
    const expected = async (T: number) => {
      const s = await connectSrc();
      const [[want], [[all]]] = await Promise.all([
        s.query(`SELECT ${SUM} FROM app.t WHERE FLOOR(ts) * 1000 < ?`, [T]).then(([r]) => r as { n: number; c: string }[]),
        s.query('SELECT COUNT(*) AS n FROM app.t').then((r) => r as unknown as [{ n: number }[]]),
      ]);
      await s.end();
      expect(Number(want!.n)).toBeGreaterThan(0);
      expect(Number(want!.n)).toBeLessThan(Number(all!.n));
      return [Number(want!.n), String(want!.c)];
    };
    const want1 = await expected(T1);
    const want2 = await expected(T2);
    expect(want2[0]).toBeGreaterThan(want1[0] as number);

    // The source's archive in the store reaches past T2: a segment closed after every row sent
    // before T2 (and a second more) was acknowledged. Not "after the last write": the round that
    // closed the last segment may have run before the writer stopped, and a round with nothing new
    // closes none.
    const needed = Math.max(T2, ...sent.filter((r) => r.sentMs < T2 + 1000).map((r) => r.ackMs));
    await until('a segment closed after T2 in the store', async () => (await reader.segments.list(src.id)).some((s) => s.closedMs > needed) || undefined, 120_000, 500);
    // Agent A is SIGKILLed in the middle of an upload (16 MiB of random bytes: the archive's next
    // segment is a multipart upload of 8 MiB parts) and is gone (its source's server keeps running,
    // unreachable for the control plane): a fork now goes to another agent on the store. (Not a
    // snapshot's upload: the source would stay `backing_up`, which a fork's source may not be.)
    const big = await connectSrc();
    await big.query('CREATE TABLE app.big (id INT PRIMARY KEY, b LONGBLOB)');
    for (let i = 0; i < 16; i++) await big.query('INSERT INTO app.big VALUES (?, ?)', [i, randomBytes(1024 * 1024)]);
    await big.end();
    const unfinished = async () => [...(await reader.backups.unfinished(src.id)).map((n) => `backup ${n}`), ...(await reader.segments.unfinished(src.id)).map((n) => `segment ${n}`)];
    await until('an upload of agent A in flight', async () => (await unfinished()).length > 0 || undefined, 120_000, 100);
    await a.proc!.kill();
    // What the kill left (parts, or objects without their manifest) is listed by no agent.
    const left = await unfinished();
    expect(left.length).toBeGreaterThan(0);
    const listed = [...(await reader.backups.list(src.id)).map((m) => `backup ${m.id}`), ...(await reader.segments.list(src.id)).map((m) => `segment ${m.seq}`)];
    expect(listed.filter((x) => left.includes(x))).toEqual([]);
    await until(`agent ${a.id} away`, async () => !(await connected()).has(a.id) || undefined, 120_000, 250);

    const fork = async (label: string, T: number) => ok('POST', MYSQL, {
      label, region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 1, allow_list: ['0.0.0.0/0'],
      fork: { source: src.id, restore_time: new Date(T).toISOString().slice(0, 19) },
    });
    const made = [await fork('storefork-t1', T1), await fork('storefork-t2', T2)];
    const forks = await Promise.all(made.map((f) => waitStatus(f.id, 'active')));
    for (const [f, T, want] of [[forks[0], T1, want1], [forks[1], T2, want2]] as const) {
      // On agent B, which never ran the source.
      expect(Object.keys(f.members).every((ip) => ip.startsWith(`${b.net}.`)), JSON.stringify(f.members)).toBe(true);
      expect(f.fork).toMatchObject({ source: src.id, restore_time: new Date(T).toISOString().slice(0, 19) });
      const fc = await credentials(f.id);
      const conn = await until(`fork ${f.id} through hosts.primary`, () => connectFrom({ source: CLIENT, host: f.hosts.primary, port: 3306, user: 'linroot', ...fc }).catch(() => undefined), 120_000, 500);
      const [[got]] = await conn.query(`SELECT ${SUM} FROM app.t`) as unknown as [{ n: number; c: string }[]];
      const [ids] = await conn.query('SELECT id FROM app.t') as unknown as [{ id: number }[]];
      const [marks] = await conn.query('SELECT v FROM app.marker') as unknown as [{ v: string }[]];
      await conn.end();
      expect([Number(got!.n), String(got!.c)], `fork to ${new Date(T).toISOString()}`).toEqual(want);
      const have = new Set(ids.map((r) => Number(r.id)));
      expect(sent.filter((r) => r.ackMs < T && !have.has(r.id)).map((r) => r.id)).toEqual([]);
      expect(sent.filter((r) => r.sentMs >= T && have.has(r.id)).map((r) => r.id)).toEqual([]);
      expect(marks.map((m) => m.v)).toEqual([marker]);
    }
    expect(existsIn(join(b.dir, 'databases'), String(src.id))).toBe(false);

    // The objects the forks were built from are encrypted: no file of the store holds the marker.
    // (Also no half-written one: Swift keeps the uploaded parts as files too.)
    const files = lab.storeFiles();
    expect(files.filter((f) => f.endsWith('.data')).length).toBeGreaterThan(0);
    expect(files.filter((f) => lab.storeFile(f)?.includes(marker))).toEqual([]);
    console.log(`[store-fork-elsewhere] source on ${a.id}, forks on ${b.id}: to ${new Date(T1).toISOString()} ${want1[0]} rows, to ${new Date(T2).toISOString()} ${want2[0]} rows (of ${sent.length} written); agent A killed with ${left.join(", ")} unfinished in the store`);
  }, 900_000);
});

function existsIn(folder: string, name: string): boolean {
  try {
    return readdirSync(folder).includes(name);
  } catch {
    return false;
  }
}
