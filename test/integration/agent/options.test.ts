// integration-lane: concurrent (agent-fixture slot 23: its own 127.76/78/79.23 blocks, port 0, temp folders; client source addresses only as local ends).
/**
 * Issue 7, agent side: encryption at rest (`encrypted`), `ssl_connection: false`, and resize
 * (a larger type restarts the node with the new limits, `updating` then `active`).
 */
import { mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { gzipSync, zstdDecompressSync } from 'node:zlib';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createDecryptStream, createEncryptStream, LEGACY_FRAME_BYTES } from '../../../agent/backup/backup-crypto.js';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningAgent } from '../../../agent/main.js';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, desiredDb, runOperation, testNet, type Driver } from './control-plane-driver.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';

describe('agent: encryption at rest, plain connections, resize', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let agent: RunningAgent;
  let stateDir: string;
  let db: DesiredDatabase;
  const net = testNet('127.78', 23);

  beforeAll(async () => {
    fx = await createAgentFixture({ id: 'agent-options', slot: 23 });
    ({ driver, stateDir } = fx);
    agent = await fx.startAgent();
    const [engine] = await detectLocalCatalogue();
    db = desiredDb({
      id: 5, engineId: engine!.id, version: engine!.version, encrypted: true, sslConnection: false,
      hostPrimary: `${net}.1`, hostSecondary: `${net}.2`, allowList: ['0.0.0.0/0'],
    });
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(5)?.status === 'active', 30_000, 'active');
  });

  afterAll(async () => {
    await fx?.close();
  });

  const connect = () => connectFrom({ source: '127.0.0.6', host: db.hostPrimary!, port: 3306, user: 'linroot', password: 'Initial.Pass_01' });

  it('ssl_connection false: a plain connection works', async () => {
    const c = await connect();
    const [rows] = await c.query("SHOW STATUS LIKE 'Ssl_cipher'");
    expect((rows as any[])[0].Value).toBe('');
    await c.end();
  });

  it('encrypted: table data is encrypted on disk', async () => {
    const c = await connect();
    await c.query('CREATE DATABASE app');
    await c.query('CREATE TABLE app.secret (id INT PRIMARY KEY, v VARCHAR(64)) ENGINE=InnoDB');
    await c.query("INSERT INTO app.secret VALUES (1, 'PLAINTEXT-MARKER-4711')");
    const [enc] = await c.query("SELECT ENCRYPTION_SCHEME AS s FROM information_schema.INNODB_TABLESPACES_ENCRYPTION WHERE NAME = 'app/secret'");
    expect(Number((enc as any[])[0]?.s)).toBe(1);
    // FOR EXPORT flushes the table's pages to its .ibd file.
    await c.query('FLUSH TABLES app.secret FOR EXPORT');
    await c.query('UNLOCK TABLES');
    await c.end();
    const dataDir = agent.agent.database(5)!.nodeSpec(1).dataDir;
    const ibd = readFileSync(join(dataDir, 'app', 'secret.ibd'));
    expect(ibd.length).toBeGreaterThan(0);
    expect(ibd.includes(Buffer.from('PLAINTEXT-MARKER-4711'))).toBe(false);
    const binlogs = readdirSync(dataDir).filter((f) => /-bin\.\d+$/.test(f));
    expect(binlogs.length).toBeGreaterThan(0);
    for (const f of binlogs) expect(readFileSync(join(dataDir, f)).includes(Buffer.from('PLAINTEXT-MARKER-4711'))).toBe(false);
  });

  it('encrypted: backups are encrypted at rest, restore decrypts them, a flipped byte is refused', async () => {
    const op = (body: Parameters<typeof runOperation>[2]) => runOperation(driver, 5, body, 30_000);
    const snap = await op({ snapshot: { label: 'encrypted_one', target: 'primary' } });
    expect(snap).toMatchObject({ ok: true });
    const dir = join(stateDir, 'backups', '5', String(snap.backupId));
    const manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8'));
    expect(manifest).toMatchObject({ format: 'mariadb-dump+zstd+aes-256-gcm', encryption: { scheme: 'aes-256-gcm-chunked-v1', frameBytes: 1024 * 1024 } });
    const stored = readFileSync(join(dir, manifest.file));
    const marker = Buffer.from('PLAINTEXT-MARKER-4711');
    expect(stored.includes(marker)).toBe(false);
    // Not a zstd stream either (whatever part of it one tries to decompress).
    const zstdMagic = Buffer.from([0x28, 0xb5, 0x2f, 0xfd]);
    expect(stored.subarray(0, 4).equals(zstdMagic)).toBe(false);
    for (let i = stored.indexOf(zstdMagic); i >= 0; i = stored.indexOf(zstdMagic, i + 1)) {
      let inflated: Buffer | undefined;
      try {
        inflated = zstdDecompressSync(stored.subarray(i));
      } catch {
        inflated = undefined;
      }
      expect(inflated?.includes(marker) ?? false).toBe(false);
    }
    // The key lives in the database's state, readable by the agent only.
    const statePath = join(stateDir, 'databases', '5', 'state.json');
    expect(statSync(statePath).mode & 0o777).toBe(0o600);
    expect(Buffer.from(JSON.parse(readFileSync(statePath, 'utf8')).backupKey, 'base64')).toHaveLength(32);

    const c = await connect();
    await c.query("UPDATE app.secret SET v = 'changed' WHERE id = 1");
    await c.query("INSERT INTO app.secret VALUES (2, 'later')");
    await c.end();
    expect(await op({ restore: { backupId: snap.backupId } })).toMatchObject({ ok: true, error: '' });
    const c2 = await connect();
    const [rows] = await c2.query('SELECT id, v FROM app.secret ORDER BY id');
    expect(rows).toEqual([{ id: 1, v: 'PLAINTEXT-MARKER-4711' }]);
    await c2.end();

    // The same dump as an older agent stored it (gzip, 64 KiB frames, its manifest saying so)
    // still restores.
    const key = JSON.parse(readFileSync(statePath, 'utf8')).backupKey as string;
    const read = async (src: Buffer, t: NodeJS.ReadWriteStream) => {
      const out: Buffer[] = [];
      await pipeline(Readable.from([src]), t, async function* (x) { for await (const b of x) out.push(b as Buffer); });
      return Buffer.concat(out);
    };
    const oldBody = await read(gzipSync(zstdDecompressSync(await read(stored, createDecryptStream(key)))), createEncryptStream(key, LEGACY_FRAME_BYTES));
    const oldId = 960;
    const oldDir = join(stateDir, 'backups', '5', String(oldId));
    mkdirSync(oldDir, { recursive: true, mode: 0o700 });
    writeFileSync(join(oldDir, 'dump.sql.gz.aes'), oldBody, { mode: 0o600 });
    writeFileSync(join(oldDir, 'manifest.json'), JSON.stringify({
      ...manifest, id: oldId, label: 'from_an_older_agent', format: 'mariadb-dump+gzip+aes-256-gcm', encryption: { scheme: 'aes-256-gcm-chunked-v1', frameBytes: LEGACY_FRAME_BYTES },
      file: 'dump.sql.gz.aes', sizeBytes: oldBody.length, sha256: createHash('sha256').update(oldBody).digest('hex'),
    }), { mode: 0o600 });
    const c4 = await connect();
    await c4.query("UPDATE app.secret SET v = 'changed again' WHERE id = 1");
    await c4.end();
    expect(await op({ restore: { backupId: oldId } })).toMatchObject({ ok: true, error: '' });
    const c5 = await connect();
    const [rows5] = await c5.query('SELECT id, v FROM app.secret ORDER BY id');
    expect(rows5).toEqual([{ id: 1, v: 'PLAINTEXT-MARKER-4711' }]);
    await c5.end();

    const bytes = Buffer.from(stored);
    bytes[Math.floor(bytes.length / 2)] ^= 0x01;
    writeFileSync(join(dir, manifest.file), bytes);
    const bad = await op({ restore: { backupId: snap.backupId } });
    expect(bad.ok).toBe(false);
    expect(bad.error).toMatch(/backup \d+ is corrupted: its checksum .*nothing was changed/);
    // Even with a checksum that matches the changed bytes, decryption refuses them (GCM tags):
    // the restore reads the backup's head before it touches the data (assertLoadable), so the
    // first frame's tag already fails and nothing is changed.
    writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ ...manifest, sha256: createHash('sha256').update(bytes).digest('hex') }));
    const forged = await op({ restore: { backupId: snap.backupId } });
    expect(forged.ok).toBe(false);
    expect(forged.error).toMatch(/backup \d+ cannot be read: frame 0 .*; nothing was changed$/);
    const c3 = await connect();
    const [still] = await c3.query('SELECT v FROM app.secret WHERE id = 1');
    expect((still as any[])[0].v).toBe('PLAINTEXT-MARKER-4711');
    await c3.end();
  });

  it('resize: a larger type restarts the node with the new limits, updating then active', async () => {
    const before = (await agent.runtime.list({}))[0]!.ref;
    const statuses = new Set<string>();
    db = { ...db, type: { id: 'g6-standard-1', memoryMb: 2048, vcpus: 1, diskMb: 51200 }, generation: 2 };
    const seen = driver.reports.length;
    driver.setDatabases([db]);
    await driver.waitFor(() => {
      for (const r of driver.reports.slice(seen)) for (const d of r.databases) statuses.add(d.status);
      return driver.db(5)?.status === 'active' && driver.db(5)?.convergedGeneration === 2;
    }, 30_000, 'resized');
    expect(statuses.has('updating')).toBe(true);
    const after = (await agent.runtime.list({}))[0]!;
    expect(after.ref).not.toBe(before);
    expect(after.spec?.memoryMb).toBe(2048);
    const c = await connect();
    const [rows] = await c.query('SELECT @@innodb_buffer_pool_size AS b');
    expect(Number((rows as any[])[0].b)).toBe(256 * 1024 * 1024);
    const [data] = await c.query('SELECT v FROM app.secret');
    expect((data as any[])[0].v).toBe('PLAINTEXT-MARKER-4711');
    await c.end();
  });
});
