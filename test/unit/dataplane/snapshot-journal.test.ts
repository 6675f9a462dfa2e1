import { appendFileSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SnapshotStore } from '../../../dataplane/config/persist.js';

/** The persisted state: a whole snapshot as the base, incremental ones journalled beside it. */
describe('snapshot store journal', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  const store = () => {
    const dir = mkdtempSync(join(tmpdir(), 'dpi-journal-'));
    dirs.push(dir);
    return new SnapshotStore(dir, 'dp-1');
  };
  const nb = (id: number, label: string) => ({ id, label, ipv4: '127.0.0.2', configs: [] });

  it('loads the base with the chain of deltas applied, in order, and private files', async () => {
    const s = store();
    await s.record({ version: 1, nonce: 'n1', nodebalancers: [nb(1, 'a'), nb(2, 'b')], databaseEndpoints: [] });
    await s.record({ version: 2, incremental: true, baseVersion: 1, nodebalancers: [nb(1, 'a2'), nb(3, 'c')], removedNodebalancers: [] });
    await s.record({ version: 4, incremental: true, baseVersion: 2, nodebalancers: [], removedNodebalancers: [2], databaseEndpointsChanged: true, databaseEndpoints: [{ databaseId: 9, role: 'primary', address: '127.0.0.3', port: 3306 }] });
    const loaded = await s.load();
    expect(loaded).toEqual({
      version: 4, nodebalancers: [nb(1, 'a2'), nb(3, 'c')],
      databaseEndpoints: [{ databaseId: 9, role: 'primary', address: '127.0.0.3', port: 3306 }],
    });
    expect(statSync(s.file).mode & 0o777).toBe(0o600);
    expect(statSync(s.journal).mode & 0o777).toBe(0o600);
  });

  it('skips deltas that do not follow the base and stops at a torn line', async () => {
    const s = store();
    await s.record({ version: 5, nodebalancers: [nb(1, 'a')] });
    await s.record({ version: 6, incremental: true, baseVersion: 5, nodebalancers: [nb(1, 'six')] });
    // Left from an older base: ignored.
    appendFileSync(s.journal, `${JSON.stringify({ version: 3, incremental: true, baseVersion: 2, nodebalancers: [nb(1, 'old')] })}\n`);
    await s.record({ version: 7, incremental: true, baseVersion: 6, nodebalancers: [nb(1, 'seven')] });
    appendFileSync(s.journal, '{"version": 8, "incremental": tr');
    expect(await s.load()).toMatchObject({ version: 7, nodebalancers: [nb(1, 'seven')] });
  });

  it('a whole snapshot replaces the base and empties the journal', async () => {
    const s = store();
    await s.record({ version: 1, nodebalancers: [nb(1, 'a')] });
    await s.record({ version: 2, incremental: true, baseVersion: 1, nodebalancers: [nb(2, 'b')] });
    await s.record({ version: 3, nodebalancers: [nb(5, 'e')] });
    expect(await s.load()).toMatchObject({ version: 3, nodebalancers: [nb(5, 'e')] });
  });
});
