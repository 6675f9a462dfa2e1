import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { SnapshotInput } from './validate.js';

/**
 * The last good snapshot on disk (`<stateDir>/dataplane-<id>.json`), so that a restarted data plane
 * serves traffic before the control plane answers (static stability). Written atomically
 * (temp file + rename) with mode 0600: it holds TLS keys.
 */
export class SnapshotStore {
  readonly file: string;

  constructor(stateDir: string, id: string) {
    this.file = join(stateDir, `dataplane-${id.replace(/[^a-zA-Z0-9_.-]/g, '_')}.json`);
  }

  async load(): Promise<SnapshotInput | null> {
    try {
      return JSON.parse(await readFile(this.file, 'utf8')) as SnapshotInput;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
  }

  async save(snapshot: SnapshotInput): Promise<void> {
    const { nonce: _nonce, ...rest } = snapshot;
    const dir = join(this.file, '..');
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const tmp = `${this.file}.${process.pid}.tmp`;
    await writeFile(tmp, JSON.stringify(rest), { mode: 0o600 });
    await rename(tmp, this.file);
  }
}
