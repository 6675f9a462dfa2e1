import { describe, expect, it } from 'vitest';
import { errantGtids, ownGtidsMissing } from '../../../agent/database/errant.js';

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

describe('a returning member\'s own transactions the primary lacks (spread clusters)', () => {
  it('is empty when the primary has every transaction the member wrote as primary', () => {
    expect(ownGtidsMissing('0-1-10', '0-1-10,0-2-15', 1)).toEqual({ gtids: [], after: '0-1-10' });
    expect(ownGtidsMissing('0-1-10', '0-1-12', 2)).toEqual({ gtids: [], after: '' });
    expect(ownGtidsMissing('', '0-2-3', 1)).toEqual({ gtids: [], after: '' });
  });

  it('names the member\'s transactions beyond the primary\'s last of them, even where the new primary wrote the same sequence numbers', () => {
    expect(ownGtidsMissing('0-1-11', '0-1-10,0-2-15', 1)).toEqual({ gtids: ['0-1-11'], after: '0-1-10' });
    expect(ownGtidsMissing('0-2-9,0-1-14', '0-1-10,0-2-30', 1)).toEqual({ gtids: ['0-1-11..14'], after: '0-1-10' });
    expect(ownGtidsMissing('0-1-3', '0-2-5', 1)).toEqual({ gtids: ['0-1-1..3'], after: '' });
  });
});
