import { describe, expect, it } from 'vitest';
import { createArchiver, type ArchivedDatabase, type ArchiverDeps } from '../../../agent/binlog/archiver.js';
import { ManualClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';

/** A database as the archive loop sees it; `local` are the members this agent runs. */
const db = (primary: number, local: number[]) => ({
  id: 7, deleted: false, busy: undefined, desired: { state: 'running' }, state: { provisioned: true, suspended: false, primary },
  nodeIndexes: () => local,
}) as unknown as ArchivedDatabase;

describe('the binlog archive loop runs only where the primary runs', () => {
  const archiver = createArchiver({ clock: new ManualClock(), logger: silentLogger() } as unknown as ArchiverDeps);

  it('archives a database whose primary is one of this agent\'s members', () => {
    expect(archiver.archivable(db(1, [1]))).toBe(true);
    expect(archiver.archivable(db(2, [1, 2, 3]))).toBe(true);
  });

  it('does not archive on an agent whose member is a replica, or whose primary\'s member moved off to another host', () => {
    // A spread cluster: this agent runs member 1; the primary (member 2) runs elsewhere. A round
    // here would ask this agent's runtime for member 2's server, which it does not have.
    expect(archiver.archivable(db(2, [1]))).toBe(false);
    // Every member moved off but the database is still being handed over: nothing of it is here.
    expect(archiver.archivable(db(1, []))).toBe(false);
  });
});
