import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { createAgent } from '../../../agent/agent.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';
import type { AgentDesired__Output } from '../../../proto/gen/fulcrum/v1/AgentDesired.js';

/** A runtime with no nodes: the agent persists desired states without touching a server. */
const noNodes = { kind: 'process', list: async () => [], close: async () => undefined } as unknown as ContainerRuntime;

const desired = (version: number): AgentDesired__Output => ({ version, databases: [], operations: [], deleteAllIntended: true }) as unknown as AgentDesired__Output;

describe('agent: persisting the desired state', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('many desired states in a row (a delete, then the next push) are written one at a time, the newest last, and close waits for the write', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fulcrum-desired-'));
    dirs.push(dir);
    const lines: { level: number; msg: string; err?: { message?: string } }[] = [];
    const logger = pino({ level: 'warn' }, new Writable({
      write(chunk: Buffer, _enc, cb) {
        lines.push(JSON.parse(chunk.toString()));
        cb();
      },
    }));
    const agent = createAgent({ id: 'persist-test', stateDir: dir, runtime: noNodes, runtimeKind: 'process', catalogue: [], logger, registry: new Registry(), clock: new ManualClock(0) });
    // Before each write shared one temporary file: the second rename found it gone (ENOENT).
    for (let v = 1; v <= 40; v++) agent.setDesired(desired(v));
    await agent.close();
    expect(JSON.parse(readFileSync(join(dir, 'desired.json'), 'utf8')).version).toBe(40);
    expect(existsSync(join(dir, 'desired.json.tmp'))).toBe(false);
    expect(readdirSync(dir).filter((f) => f.endsWith('.tmp'))).toEqual([]);
    expect(lines.filter((l) => l.level >= 50).map((l) => `${l.msg}: ${l.err?.message ?? ''}`)).toEqual([]);
  });
});
