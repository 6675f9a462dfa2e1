import { describe, expect, it } from 'vitest';
import { frameAt } from '../../../agent/runtime/docker-frames.js';
import { stripFrames } from '../../../agent/runtime/docker-container.js';

const frame = (stream: number, text: string) => {
  const payload = Buffer.from(text);
  const header = Buffer.alloc(8);
  header[0] = stream;
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
};

describe('docker frames', () => {
  it('reads a header: stream, where the payload lies, and whether it looks like a frame', () => {
    const buf = Buffer.concat([frame(1, 'out'), frame(2, 'err!')]);
    expect(frameAt(buf)).toEqual({ stream: 1, start: 8, end: 11, wellFormed: true });
    expect(frameAt(buf, 11)).toEqual({ stream: 2, start: 19, end: 23, wellFormed: true });
    expect(frameAt(buf, 23)).toBeUndefined();
    expect(frameAt(buf.subarray(0, 7))).toBeUndefined();
    expect(frameAt(Buffer.from('plain text, not framed'))?.wellFormed).toBe(false);
  });

  it('a frame still arriving ends past the buffer', () => {
    const f = frameAt(frame(1, 'abcdef').subarray(0, 10));
    expect(f?.end).toBe(14);
  });

  it('stripFrames keeps the text of stdout and stderr, and leaves unframed text as it is', () => {
    expect(stripFrames(Buffer.concat([frame(1, 'a\n'), frame(2, 'b\n')]))).toBe('a\nb\n');
    expect(stripFrames(Buffer.from('plain\n'))).toBe('plain\n');
    expect(stripFrames(frame(1, 'truncated').subarray(0, 12))).toBe('trun');
  });
});
