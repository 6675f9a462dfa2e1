import { describe, expect, it } from 'vitest';
import { errantGtids } from '../../../agent/database/errant.js';

describe('errant transactions of an old primary', () => {
  it('is empty when the new primary has everything the old one had', () => {
    expect(errantGtids('0-1-10', '0-1-10')).toEqual([]);
    expect(errantGtids('0-1-10', '0-2-12')).toEqual([]);
    expect(errantGtids('', '0-1-3')).toEqual([]);
  });

  it('names one transaction or a run, per domain, with the old primary server id', () => {
    expect(errantGtids('0-1-11', '0-1-10')).toEqual(['0-1-11']);
    expect(errantGtids('0-1-14', '0-1-10')).toEqual(['0-1-11..14']);
    expect(errantGtids('0-1-14,1-1-3', '0-1-14')).toEqual(['1-1-1..3']);
    expect(errantGtids('0-1-5', '')).toEqual(['0-1-1..5']);
  });
});
