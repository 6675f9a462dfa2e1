import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../lib/logger.js';
import { IgnoredReports } from '../../../control-plane/domain/databases/report-scope.js';

/** docs/databases.md, "Whose report counts": an ignored part of a report is logged once, not per report. */
describe('IgnoredReports', () => {
  it('logs each (agent, database, field) once: a warning for a database held by others, debug for an unknown one', () => {
    const lines: { level: number; agent: string; database: number; field: string }[] = [];
    const log = createLogger('test', { level: 'debug', destination: { write: (s: string) => void lines.push(JSON.parse(s)) } });
    const ignored = new IgnoredReports(log);
    for (let i = 0; i < 5; i++) {
      ignored.note('agent-b', 7, 'last_auto_backup_day', 'foreign');
      ignored.note('agent-b', 8, 'databases', 'unknown');
    }
    ignored.note('agent-b', 7, 'operation_results', 'foreign');
    ignored.note('agent-c', 7, 'last_auto_backup_day', 'foreign');
    expect(lines.map((l) => [l.level, l.agent, l.database, l.field])).toEqual([
      [40, 'agent-b', 7, 'last_auto_backup_day'],
      [20, 'agent-b', 8, 'databases'],
      [40, 'agent-b', 7, 'operation_results'],
      [40, 'agent-c', 7, 'last_auto_backup_day'],
    ]);
  });
});
