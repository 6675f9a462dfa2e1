import { describe, expect, it } from 'vitest';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { median, percentile, table } from '../../../bench/common/stats.js';
import { parseWrkOutput } from '../../../bench/dataplane/wrk.js';
import { summarizeProfile } from '../../../bench/dataplane/profile.js';

describe('bench statistics', () => {
  it('takes medians of odd and even counts and ignores non-numbers', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([NaN, 5])).toBe(5);
    expect(median([])).toBeNaN();
  });

  it('uses nearest-rank percentiles', () => {
    const xs = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(percentile(xs, 50)).toBe(50);
    expect(percentile(xs, 99)).toBe(99);
    expect(percentile([7], 99)).toBe(7);
    expect(percentile([10, 20], 99)).toBe(20);
  });

  it('aligns table columns', () => {
    expect(table([['a', 'bb'], ['ccc', 'd']]).split('\n')).toEqual(['a    bb', 'ccc   d']);
  });
});

describe('wrk result line', () => {
  it('reads counts, errors and latency in ms', () => {
    const r = parseWrkOutput('Running 2s test\nWRK-RESULT 1000 2000000 50000 1 2 3 4 5 800 12500\n');
    expect(r.requests).toBe(1000);
    expect(r.durationS).toBe(2);
    expect(r.reqPerS).toBe(500);
    expect(r.errors).toEqual({ connect: 1, read: 2, write: 3, status: 4, timeout: 5 });
    expect(r.p50Ms).toBe(0.8);
    expect(r.p99Ms).toBe(12.5);
  });

  it('names the problem when wrk printed no result', () => {
    expect(() => parseWrkOutput('unable to connect to 127.0.0.1:1 Connection refused')).toThrow(/no result.*Connection refused/);
    expect(() => parseWrkOutput('WRK-RESULT 1 2 x')).toThrow(/unreadable/);
  });
});

describe('CPU profile summary', () => {
  it('reports shares of busy time, not of idle time', () => {
    const profile = {
      nodes: [
        { id: 1, callFrame: { functionName: '(root)', url: '', lineNumber: -1 } },
        { id: 2, callFrame: { functionName: '(idle)', url: '', lineNumber: -1 } },
        { id: 3, callFrame: { functionName: 'writeBuffer', url: '', lineNumber: -1 } },
        { id: 4, callFrame: { functionName: 'parseFields', url: 'file:///x/dist/dataplane/listeners/http-head.js', lineNumber: 74 } },
      ],
      startTime: 0,
      endTime: 4000,
      samples: [2, 2, 3, 4, 3, 3],
      timeDeltas: [1000, 1000, 500, 500, 500, 500],
    };
    const dir = mkdtempSync(join(tmpdir(), 'fulcrum-profile-test-'));
    const file = join(dir, 'p.cpuprofile');
    writeFileSync(file, JSON.stringify(profile));
    const text = summarizeProfile(file, 5);
    expect(text).toMatch(/busy 0\.0 s \(50%\)/);
    expect(text).toMatch(/socket writes \(syscall, loopback delivery\)\s+75\.0%/);
    expect(text).toMatch(/our data plane code \(dataplane\/\*\)\s+25\.0%/);
    expect(text).toMatch(/parseFields {2}dataplane\/listeners\/http-head\.js:75\s+25\.0%/);
  });
});
