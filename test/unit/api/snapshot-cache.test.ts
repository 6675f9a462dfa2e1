import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import {
  SnapshotCache, VersionLedger, contentHash, type Snapshot, type SnapshotSource, type SubscriberStatus, type SubscriberStatusStore,
} from '../../../control-plane/push/snapshot-cache.js';
import type { KeyValueRepository } from '../../../control-plane/domain/ports.js';

/** The push cache over in-memory ports and a manual clock (its timers fire only on advance). */
function setup(kv = memoryKv(), status = memoryStatus()) {
  const clock = new ManualClock();
  const state = { items: ['a'] as string[] };
  const ledger = new VersionLedger(kv, 'counter');
  let reads = 0;
  const source: SnapshotSource<string[], string[]> = {
    read: async () => {
      reads++;
      return [...state.items];
    },
    select: (round, sub) => round.filter((x) => sub.region === '*' || x.startsWith(sub.region)),
    version: (_round, sub, hash) => ledger.versionFor(`key:${sub.id}`, hash),
  };
  const cache = new SnapshotCache({ source, status, clock, coalesceMs: 10 });
  const connect = async (id: string, region = '*') => {
    const sent: Snapshot<string[]>[] = [];
    let ended = false;
    const sub = await cache.connect(id, region, 0, { send: (s) => sent.push(s), end: () => (ended = true) });
    return { sub, sent, ended: () => ended };
  };
  /** Advances the clock and waits for the rounds its timers started. */
  const advance = async (ms: number) => {
    clock.advance(ms);
    await cache.idle();
  };
  return { cache, clock, state, kv, status, connect, advance, reads: () => reads };
}

function memoryKv(): KeyValueRepository {
  const m = new Map<string, string>();
  return { get: async (k) => m.get(k), set: async (k, v) => void m.set(k, v) };
}

function memoryStatus(): SubscriberStatusStore & { rows: Map<string, SubscriberStatus> } {
  const rows = new Map<string, SubscriberStatus>();
  return {
    rows, get: async (id) => rows.get(id), put: async (s) => void rows.set(s.id, s), list: async () => [...rows.values()],
    release: async (replica, id, at) => {
      for (const s of rows.values()) {
        if (s.connected && s.replica === replica && (id === undefined || s.id === id)) rows.set(s.id, { ...s, connected: false, lastSeen: at ?? s.lastSeen });
      }
    },
  };
}

describe('SnapshotCache', () => {
  it('sends on connect, coalesces a burst into one round read once, and never resends identical content', async () => {
    const t = setup();
    const a = await t.connect('dp-1');
    const b = await t.connect('dp-2');
    await t.cache.push(a.sub);
    await t.cache.push(b.sub);
    expect(a.sent.map((s) => s.version)).toEqual([1]);
    expect(b.sent.map((s) => s.content)).toEqual([['a']]);
    const readsBefore = t.reads();
    t.state.items.push('b');
    for (let i = 0; i < 5; i++) t.cache.notifyChanged();
    await t.advance(9);
    expect(a.sent).toHaveLength(1);
    await t.advance(1);
    expect(t.reads() - readsBefore).toBe(1);
    // One counter, a version per subscriber key: dp-2 took 2, so the new content is 3 and 4.
    expect(a.sent.map((s) => s.version)).toEqual([1, 3]);
    expect(b.sent.map((s) => s.version)).toEqual([2, 4]);
    expect(b.sent.at(-1)!.content).toEqual(['a', 'b']);
    t.cache.notifyChanged();
    await t.advance(10);
    expect(a.sent).toHaveLength(2);
    expect((await t.cache.push(a.sub, true))!.version).toBe(3);
  });

  it('filters per subscriber and only sends those whose share changed', async () => {
    const t = setup();
    t.state.items = ['us-1', 'eu-1'];
    const us = await t.connect('us', 'us');
    const eu = await t.connect('eu', 'eu');
    await t.cache.push(us.sub);
    await t.cache.push(eu.sub);
    t.state.items.push('us-2');
    t.cache.notifyChanged();
    await t.advance(10);
    expect(us.sent.map((s) => s.content)).toEqual([['us-1'], ['us-1', 'us-2']]);
    expect(eu.sent).toHaveLength(1);
  });

  it('matches answers by nonce, records ACK and NACK, and resends after a NACK', async () => {
    const t = setup();
    const a = await t.connect('dp');
    const first = (await t.cache.push(a.sub))!;
    expect(await t.cache.answer(a.sub, 'stale', 1)).toBeUndefined();
    expect(await t.cache.answer(a.sub, first.nonce, 0, 'bad cert')).toEqual({ nonce: first.nonce, version: 1 });
    expect(await t.status.get('dp')).toMatchObject({ connected: true, appliedVersion: 0, lastError: 'bad cert', lastErrorAt: t.clock.now() });
    const again = (await t.cache.push(a.sub))!;
    expect(again.version).toBe(1);
    expect(again.nonce).not.toBe(first.nonce);
    expect(await t.cache.answer(a.sub, first.nonce, 1)).toBeUndefined();
    await t.cache.answer(a.sub, again.nonce, 1);
    expect(await t.status.get('dp')).toMatchObject({ appliedVersion: 1, lastError: null, lastErrorAt: null });
  });

  it('ends a replaced stream, ignores its late disconnect, and keeps the last error across a reconnect', async () => {
    const t = setup();
    const old = await t.connect('dp');
    const s = (await t.cache.push(old.sub))!;
    await t.cache.answer(old.sub, s.nonce, 0, 'nope');
    const fresh = await t.connect('dp');
    expect(old.ended()).toBe(true);
    expect(await t.cache.disconnect(old.sub)).toBe(false);
    expect(await t.status.get('dp')).toMatchObject({ connected: true, lastError: 'nope' });
    expect(t.cache.size).toBe(1);
    expect(await t.cache.disconnect(fresh.sub)).toBe(true);
    expect((await t.status.get('dp'))?.connected).toBe(false);
    expect(t.cache.size).toBe(0);
  });

  it('keeps versions increasing across restarts and marks everyone disconnected on start', async () => {
    const kv = memoryKv();
    const status = memoryStatus();
    const first = setup(kv, status);
    await first.cache.push((await first.connect('dp')).sub);
    first.state.items.push('b');
    await first.cache.push((await first.connect('dp')).sub);
    const second = setup(kv, status);
    await second.cache.idle();
    expect((await status.get('dp'))?.connected).toBe(false);
    second.state.items = ['a', 'b'];
    expect((await second.cache.push((await second.connect('dp')).sub))!.version).toBe(2);
    second.state.items = ['c'];
    expect((await second.cache.push((await second.connect('dp')).sub))!.version).toBe(3);
  });

  it('cancels a pending round on close', async () => {
    const t = setup();
    const a = await t.connect('dp');
    t.cache.notifyChanged();
    t.cache.close();
    expect(a.ended()).toBe(true);
    expect(t.clock.pendingTimers()).toBe(0);
  });
});

describe('VersionLedger', () => {
  it('raises new content above a floor and reads a bare stored hash as the counter version', async () => {
    const kv = memoryKv();
    const ledger = new VersionLedger(kv, 'n');
    expect(await ledger.versionFor('k', 'h1', 41)).toBe(42);
    expect(await ledger.versionFor('k', 'h1', 100)).toBe(42);
    await kv.set('legacy', contentHash(['x']));
    expect(await ledger.versionFor('legacy', contentHash(['x']))).toBe(42);
    expect(await ledger.versionFor('legacy', contentHash(['y']))).toBe(43);
  });
});
