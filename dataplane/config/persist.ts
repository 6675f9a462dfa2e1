import { appendFile, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { SnapshotInput } from './validate.js';

/** Incremental snapshots journalled before the whole state is rewritten into the base file. */
const COMPACT_AFTER = 200;

/**
 * The last good state on disk (`<stateDir>/dataplane-<id>.json`), so that a restarted data plane
 * serves traffic before the control plane answers (static stability). A whole snapshot is written
 * atomically (temp file + rename); an incremental one is appended to a journal beside it
 * (`.deltas`, one JSON line each), so persisting a change costs what the change costs, and the
 * journal is folded into the base file every COMPACT_AFTER entries. Mode 0600: both hold TLS keys.
 */
export class SnapshotStore {
  readonly file: string;
  readonly journal: string;
  private journalled = 0;
  private chain: Promise<void> = Promise.resolve();

  constructor(stateDir: string, id: string) {
    this.file = join(stateDir, `dataplane-${id.replace(/[^a-zA-Z0-9_.-]/g, '_')}.json`);
    this.journal = `${this.file}.deltas`;
  }

  /** The whole last good state: the base file with the journal's changes applied in order. */
  async load(): Promise<SnapshotInput | null> {
    let base: SnapshotInput;
    try {
      base = JSON.parse(await readFile(this.file, 'utf8')) as SnapshotInput;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
    let lines: string[] = [];
    try {
      lines = (await readFile(this.journal, 'utf8')).split('\n').filter((l) => l.trim() !== '');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    for (const line of lines) {
      let delta: SnapshotInput;
      try {
        delta = JSON.parse(line) as SnapshotInput;
      } catch {
        break; // a line cut short by a crash ends the journal
      }
      // Only a chain of changes on top of the base counts (a crash between writing a new base
      // and emptying the journal leaves changes that belong to an older base).
      if (Number(delta.baseVersion) !== Number(base.version)) continue;
      base = mergeDelta(base, delta);
    }
    this.journalled = lines.length;
    return base;
  }

  /** Records a snapshot the engine applied: whole ones replace the file, incremental ones append. */
  record(snapshot: SnapshotInput): Promise<void> {
    const run = this.chain.then(() => (snapshot.incremental ? this.append(snapshot) : this.save(snapshot)));
    this.chain = run.catch(() => undefined);
    return run;
  }

  /** Writes a whole state as the new base and empties the journal. */
  async save(snapshot: SnapshotInput): Promise<void> {
    const { nonce: _nonce, ...rest } = snapshot;
    const dir = join(this.file, '..');
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const tmp = `${this.file}.${process.pid}.tmp`;
    await writeFile(tmp, JSON.stringify(rest), { mode: 0o600 });
    await rename(tmp, this.file);
    await rm(this.journal, { force: true });
    this.journalled = 0;
  }

  private async append(delta: SnapshotInput): Promise<void> {
    const { nonce: _nonce, ...rest } = delta;
    await appendFile(this.journal, `${JSON.stringify(rest)}\n`, { mode: 0o600 });
    if (++this.journalled < COMPACT_AFTER) return;
    // Folded in behind this change, not before its ACK: the journal alone already holds it.
    this.journalled = 0;
    this.chain = this.chain.then(async () => {
      const whole = await this.load();
      if (whole) await this.save(whole);
    }).catch(() => undefined);
  }
}

/** `base` with an incremental snapshot applied (NodeBalancers replaced or removed by id). */
export function mergeDelta(base: SnapshotInput, delta: SnapshotInput): SnapshotInput {
  const byId = new Map((base.nodebalancers ?? []).map((nb) => [Number(nb.id), nb]));
  for (const id of delta.removedNodebalancers ?? []) byId.delete(Number(id));
  for (const nb of delta.nodebalancers ?? []) byId.set(Number(nb.id), nb);
  return {
    version: delta.version,
    nodebalancers: [...byId.values()],
    databaseEndpoints: delta.databaseEndpointsChanged ? delta.databaseEndpoints : base.databaseEndpoints,
  };
}
