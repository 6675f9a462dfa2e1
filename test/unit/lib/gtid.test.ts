import { describe, expect, it } from 'vitest';
import { gtidContains, gtidInHistory } from '../../../lib/gtid.js';

describe('a GTID position holding another', () => {
  it('compares sequence numbers per domain, whatever server wrote them', () => {
    expect(gtidContains('0-1-10', '0-1-10')).toBe(true);
    expect(gtidContains('0-3-12', '0-1-10')).toBe(true);
    expect(gtidContains('0-1-9', '0-1-10')).toBe(false);
    // A wiped node holds nothing.
    expect(gtidContains('', '0-1-10')).toBe(false);
    expect(gtidContains('0-1-10', '0-1-10,1-2-1')).toBe(false);
    expect(gtidContains('0-1-10,1-2-4', '1-2-3, 0-1-8')).toBe(true);
  });

  it('holds an empty (or unparseable) position: nothing was required', () => {
    expect(gtidContains('', '')).toBe(true);
    expect(gtidContains('0-1-1', 'garbage')).toBe(true);
  });
});

describe('a GTID position in a server\'s binlog history', () => {
  it('holds a position whose every GTID the state says the server logged', () => {
    expect(gtidInHistory('0-1-20', '0-1-12')).toBe(true);
    expect(gtidInHistory('0-1-20,0-2-31', '0-1-12')).toBe(true);
    expect(gtidInHistory('0-1-20,0-2-31,1-1-4', '0-2-31,1-1-3')).toBe(true);
    expect(gtidInHistory('0-1-20', '')).toBe(true);
  });

  it('refuses one taken past the history: an errant transaction of an old primary, or another server\'s', () => {
    // The old primary (server 1) logged 0-1-21 after its last transaction the new primary has (0-1-20).
    expect(gtidInHistory('0-1-20,0-2-31', '0-1-21')).toBe(false);
    expect(gtidInHistory('0-2-31', '0-3-5')).toBe(false);
    expect(gtidInHistory('', '0-1-1')).toBe(false);
    expect(gtidInHistory('0-1-20', 'garbage')).toBe(false);
  });
});
