import { describe, expect, it } from 'vitest';
import { DATAPLANE_NODE_FLAGS, withDataplaneHeapFlags } from '../../../lib/node-flags.js';

describe('the data plane\'s V8 flags', () => {
  it('adds the semi-space cap, keeps what was given, and leaves an operator\'s own size alone', () => {
    expect(DATAPLANE_NODE_FLAGS).toEqual(['--max-semi-space-size=16']);
    expect(withDataplaneHeapFlags([])).toEqual(['--max-semi-space-size=16']);
    expect(withDataplaneHeapFlags(['--enable-source-maps'])).toEqual(['--enable-source-maps', '--max-semi-space-size=16']);
    expect(withDataplaneHeapFlags(['--max-semi-space-size=32'])).toEqual(['--max-semi-space-size=32']);
  });
});
