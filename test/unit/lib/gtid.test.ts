import { describe, expect, it } from 'vitest';
import { gtidContains } from '../../../lib/gtid.js';

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
