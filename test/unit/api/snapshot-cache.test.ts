import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import {
  SnapshotCache, VersionLedger, contentHash, type Snapshot, type SnapshotSource, type SubscriberStatus, type SubscriberStatusStore,
} from '../../../control-plane/push/snapshot-cache.js';
import type { KeyValueRepository } from '../../../control-plane/store/ports.js';

/** The push cache over in-memory ports and a manual clock (its timers fire only on advance). */
function setup(kv = memoryKv(), status = memoryStatus()) {
  const clock = new ManualClock();
  const state = { items: ['a'] as string[] };
  const ledger = new VersionLedger(kv, 'counter');
  let reads = 0;
  const source: SnapshotSource<string[], string[]> = {
    read: () => {
      reads++;
      return [...state.items];
    },
    select: (round, sub) => round.filter((x) => sub.region === '*' || x.startsWith(sub.region)),
    version: (_round, sub, hash) => ledger.versionFor(`key:${sub.id}`, hash),
  };
  const cache = new SnapshotCache({ source, status, clock, coalesceMs: 10 });
  const connect = (id: string, region = '*') => {
    const sent: Snapshot<string[]>[] = [];
    let ended = false;
    const sub = cache.connect(id, region, 0, { send: (s) => sent.push(s), end: () => (ended = true) });
    return { sub, sent, ended: () => ended };
  };
  return { cache, clock, state, kv, status, connect, reads: () => reads };
}

function memoryKv(): KeyValueRepository {
  const m = new Map<string, string>();
  return { get: (k) => m.get(k), set: (k, v) => void m.set(k, v) };
}

function memoryStatus(): SubscriberStatusStore & { rows: Map<string, SubscriberStatus> } {
  const rows = new Map<string, SubscriberStatus>();
  return { rows, get: (id) => rows.get(id), put: (s) => void rows.set(s.id, s), list: () => [...rows.values()] };
}

describe('SnapshotCache', () => {
  it('sends on connect, coalesces a burst into one round read once, and never resends identical content', () => {
    const t = setup();
    const a = t.connect('dp-1');
    const b = t.connect('dp-2');
    t.cache.push(a.sub);
    t.cache.push(b.sub);
    expect(a.sent.map((s) => s.version)).toEqual([1]);
    expect(b.sent.map((s) => s.content)).toEqual([['a']]);
    const readsBefore = t.reads();
    t.state.items.push('b');
    for (let i = 0; i < 5; i++) t.cache.notifyChanged();
    t.clock.advance(9);
    expect(a.sent).toHaveLength(1);
    t.clock.advance(1);
    expect(t.reads() - readsBefore).toBe(1);
    // One counter, a version per subscriber key: dp-2 took 2, so the new content is 3 and 4.
    expect(a.sent.map((s) => s.version)).toEqual([1, 3]);
    expect(b.sent.map((s) => s.version)).toEqual([2, 4]);
    expect(b.sent.at(-1)!.content).toEqual(['a', 'b']);
    t.cache.notifyChanged();
    t.clock.advance(10);
    expect(a.sent).toHaveLength(2);
    expect(t.cache.push(a.sub, true)!.version).toBe(3);
  });

  it('filters per subscriber and only sends those whose share changed', () => {
    const t = setup();
    t.state.items = ['us-1', 'eu-1'];
    const us = t.connect('us', 'us');
    const eu = t.connect('eu', 'eu');
    t.cache.push(us.sub);
    t.cache.push(eu.sub);
    t.state.items.push('us-2');
    t.cache.notifyChanged();
    t.clock.advance(10);
    expect(us.sent.map((s) => s.content)).toEqual([['us-1'], ['us-1', 'us-2']]);
    expect(eu.sent).toHaveLength(1);
  });

  it('matches answers by nonce, records ACK and NACK, and resends after a NACK', () => {
    const t = setup();
    const a = t.connect('dp');
    const first = t.cache.push(a.sub)!;
    expect(t.cache.answer(a.sub, 'stale', 1)).toBeUndefined();
    expect(t.cache.answer(a.sub, first.nonce, 0, 'bad cert')).toEqual({ nonce: first.nonce, version: 1 });
    expect(t.status.get('dp')).toMatchObject({ connected: true, appliedVersion: 0, lastError: 'bad cert', lastErrorAt: t.clock.now() });
    const again = t.cache.push(a.sub)!;
    expect(again.version).toBe(1);
    expect(again.nonce).not.toBe(first.nonce);
    expect(t.cache.answer(a.sub, first.nonce, 1)).toBeUndefined();
    t.cache.answer(a.sub, again.nonce, 1);
    expect(t.status.get('dp')).toMatchObject({ appliedVersion: 1, lastError: null, lastErrorAt: null });
  });

  it('ends a replaced stream, ignores its late disconnect, and keeps the last error across a reconnect', () => {
    const t = setup();
    const old = t.connect('dp');
    const s = t.cache.push(old.sub)!;
    t.cache.answer(old.sub, s.nonce, 0, 'nope');
    const fresh = t.connect('dp');
    expect(old.ended()).toBe(true);
    expect(t.cache.disconnect(old.sub)).toBe(false);
    expect(t.status.get('dp')).toMatchObject({ connected: true, lastError: 'nope' });
    expect(t.cache.size).toBe(1);
    expect(t.cache.disconnect(fresh.sub)).toBe(true);
    expect(t.status.get('dp')?.connected).toBe(false);
    expect(t.cache.size).toBe(0);
  });

  it('keeps versions increasing across restarts and marks everyone disconnected on start', () => {
    const kv = memoryKv();
    const status = memoryStatus();
    const first = setup(kv, status);
    first.cache.push(first.connect('dp').sub);
    first.state.items.push('b');
    first.cache.push(first.connect('dp').sub);
    const second = setup(kv, status);
    expect(status.get('dp')?.connected).toBe(false);
    second.state.items = ['a', 'b'];
    expect(second.cache.push(second.connect('dp').sub)!.version).toBe(2);
    second.state.items = ['c'];
    expect(second.cache.push(second.connect('dp').sub)!.version).toBe(3);
  });

  it('cancels a pending round on close', () => {
    const t = setup();
    const a = t.connect('dp');
    t.cache.notifyChanged();
    t.cache.close();
    expect(a.ended()).toBe(true);
    expect(t.clock.pendingTimers()).toBe(0);
  });
});

describe('VersionLedger', () => {
  it('raises new content above a floor and reads a bare stored hash as the counter version', () => {
    const kv = memoryKv();
    const ledger = new VersionLedger(kv, 'n');
    expect(ledger.versionFor('k', 'h1', 41)).toBe(42);
    expect(ledger.versionFor('k', 'h1', 100)).toBe(42);
    kv.set('legacy', contentHash(['x']));
    expect(ledger.versionFor('legacy', contentHash(['x']))).toBe(42);
    expect(ledger.versionFor('legacy', contentHash(['y']))).toBe(43);
  });
});
