import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { drainedOrClosed } from '../../../lib/drained.js';

describe('drainedOrClosed', () => {
  it('leaves no listener behind over many waits, and resolves on close too', async () => {
    const s = new PassThrough({ highWaterMark: 4 });
    const drainBefore = s.listenerCount('drain');
    const closeBefore = s.listenerCount('close');
    for (let i = 0; i < 50; i++) {
      expect(s.write(Buffer.alloc(8))).toBe(false);
      const waited = drainedOrClosed(s);
      s.read();
      await waited;
    }
    expect(s.listenerCount('drain')).toBe(drainBefore);
    expect(s.listenerCount('close')).toBe(closeBefore);
    expect(s.write(Buffer.alloc(8))).toBe(false);
    const waited = drainedOrClosed(s);
    s.destroy();
    await waited;
    expect(s.listenerCount('drain')).toBe(drainBefore);
  });
});
