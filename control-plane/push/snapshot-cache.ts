import { createHash, randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Clock, Timer } from '../../lib/clock.js';
import type { KeyValueRepository } from '../domain/ports.js';

/**
 * The state-of-the-world push both streams share (docs/architecture.md, "The streams"): each
 * subscriber (a data plane or an agent) gets its whole desired state with a version and a nonce;
 * bursts of changes are coalesced; content identical to what a subscriber last received is not
 * resent; and what the control plane knows of each subscriber (connected, applied version, last
 * error) is kept in a status store. The config and agent servers are stream adapters over this.
 * The store answers asynchronously; the cache runs its work one piece at a time, in the order it
 * was asked for, so a round and a stream's first push never interleave.
 */

/** What the control plane records about one subscriber. */
export interface SubscriberStatus {
  id: string;
  region: string;
  connected: boolean;
  /** The control-plane replica holding its stream ('' with one control plane). */
  replica: string;
  appliedVersion: number;
  lastError: string | null;
  lastErrorAt: number | null;
  lastSeen: number | null;
}

/** Where subscriber status persists, so that operators read it and it survives restarts. */
export interface SubscriberStatusStore {
  get(id: string): Promise<SubscriberStatus | undefined>;
  put(s: SubscriberStatus): Promise<void>;
  list(): Promise<SubscriberStatus[]>;
  /**
   * Marks disconnected the subscribers (only `id`, when given) whose stream `replica` holds,
   * `lastSeen` = `at` when given; one another replica holds since is left as it is.
   */
  release(replica: string, id?: string, at?: number): Promise<void>;
}

export interface Snapshot<C> {
  version: number;
  nonce: string;
  content: C;
}

/** One open stream. Adapters hold it between messages; its fields belong to the cache. */
export interface Subscriber<C> {
  readonly id: string;
  readonly region: string;
  /** Hash of the content last sent; undefined makes the next push send whatever there is. */
  sentHash?: string;
  /** The snapshot awaiting an ACK or NACK. */
  pending?: { nonce: string; version: number };
  /**
   * Takes incremental snapshots (the source's `delta`) once it holds a full one. Such a
   * subscriber has at most one snapshot in flight: a change while one is pending waits for its
   * answer (`behind`), so every change applies on top of a state the subscriber ACKed.
   */
  incremental?: boolean;
  behind?: boolean;
  readonly stream: { send(s: Snapshot<C>): void; end(): void };
}

/**
 * Where the content comes from. `read` runs once per push round and its result is shared by
 * every subscriber of the round, so the store is read once however many subscribers there are.
 */
export interface SnapshotSource<R, C> {
  /** Reads the desired state; `subscribers` are the open streams (placement may depend on them). */
  read(subscribers: readonly Subscriber<C>[]): Promise<R>;
  /** The part of a round one subscriber receives. */
  select(round: R, sub: Subscriber<C>): C;
  /** The version to send `hash` under, normally from a VersionLedger. */
  version(round: R, sub: Subscriber<C>, hash: string): Promise<number>;
  /**
   * The hash of what `select` would return, without building it; a large state keeps this
   * cheap (docs/dataplane.md, "Incremental snapshots"). Without it, `select` runs and is hashed.
   */
  hash?(round: R, sub: Subscriber<C>): string;
  /** What changed since the last content `sub` was sent (for incremental subscribers). */
  delta?(round: R, sub: Subscriber<C>): C;
  /**
   * A (re)connecting incremental subscriber says it serves `version`: when that is the round's
   * version, it holds the whole state already; record that and return the (empty) change to send
   * instead of the whole state. Undefined: send it whole.
   */
  resume?(round: R, sub: Subscriber<C>, version: number): C | undefined;
}

export function contentHash(content: unknown): string {
  return createHash('sha256').update(JSON.stringify(content)).digest('hex');
}

/**
 * Versions kept in the key-value store: a version is issued once, from a counter that only
 * increases (so it keeps increasing across control-plane restarts), and content equal to what a
 * key last had keeps its version.
 */
export class VersionLedger {
  constructor(
    private readonly kv: KeyValueRepository,
    private readonly counterKey: string,
  ) {}

  /** Version of `hash` under `key`; new content gets one above every issued version and `floor`. */
  async versionFor(key: string, hash: string, floor = 0): Promise<number> {
    // Replicas on one PostgreSQL store read and raise the counter in one transaction, so equal
    // content gets one version whichever replica asks first (docs/architecture.md, "The store").
    return this.kv.atomically ? this.kv.atomically(() => this.issue(key, hash, floor)) : this.issue(key, hash, floor);
  }

  private async issue(key: string, hash: string, floor: number): Promise<number> {
    const counter = Number((await this.kv.get(this.counterKey)) ?? '0');
    const stored = (await this.kv.get(key)) ?? '0:';
    // A bare hash (as the config stream stored it before keys carried their version) belongs to
    // the counter's current version: that stream has one key, so the two never differ.
    const [lastVersion, lastHash] = stored.includes(':') ? stored.split(':') : [String(counter), stored];
    if (lastHash === hash) return Number(lastVersion);
    const version = Math.max(counter, floor) + 1;
    await this.kv.set(this.counterKey, String(version));
    await this.kv.set(key, `${version}:${hash}`);
    return version;
  }
}

export interface SnapshotCacheOptions<R, C> {
  source: SnapshotSource<R, C>;
  status: SubscriberStatusStore;
  clock: Clock;
  /**
   * This control-plane replica's id, recorded with each stream it holds ('' with one control
   * plane); a start, a close or a stream's end clears only what it holds (docs/architecture.md,
   * "The streams").
   */
  replica?: string;
  /** Changes arriving within this window are sent as one round. */
  coalesceMs?: number;
  /** Hears of a round or status write that failed (the next change tries again). */
  onError?: (err: unknown) => void;
  /** Hears how long each coalesced round took (read, build, serialise and send), in ms. */
  onRound?: (ms: number) => void;
}

export class SnapshotCache<R, C> {
  private readonly subs = new Map<string, Subscriber<C>>();
  private timer: Timer | undefined;
  private work: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(private readonly o: SnapshotCacheOptions<R, C>) {
    // A restart leaves no stream open: nothing this replica held is connected until it says
    // hello again. Hosts on other replicas are theirs to clear.
    void this.serial(() => o.status.release(this.replica)).catch((err) => o.onError?.(err));
  }

  /** Runs `fn` after everything asked for before it. */
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.work.then(fn);
    this.work = next.catch(() => undefined);
    return next;
  }

  private get replica(): string {
    return this.o.replica ?? '';
  }

  /** Resolves when everything asked for so far has run (tests and shutdown wait on it). */
  idle(): Promise<void> {
    return this.work.then(() => undefined);
  }

  /** Open streams. */
  get size(): number {
    return this.subs.size;
  }

  /** The recorded status of a subscriber, connected or not. */
  status(id: string): Promise<SubscriberStatus | undefined> {
    return this.o.status.get(id);
  }

  /**
   * Registers a stream that has said who it is; an older stream of the same id is ended (the
   * subscriber reconnected). Does not push: the adapter decides when the first snapshot goes.
   */
  connect(id: string, region: string, appliedVersion: number, stream: Subscriber<C>['stream']): Promise<Subscriber<C>> {
    this.subs.get(id)?.stream.end();
    const sub: Subscriber<C> = { id, region, stream };
    this.subs.set(id, sub);
    return this.serial(async () => {
      const prev = await this.o.status.get(id);
      await this.o.status.put({
        id, region, connected: true, replica: this.replica, appliedVersion,
        lastError: prev?.lastError ?? null, lastErrorAt: prev?.lastErrorAt ?? null, lastSeen: this.o.clock.now(),
      });
      return sub;
    });
  }

  /** Records a sign of life that carries the subscriber's applied version (agent reports). */
  seen(sub: Subscriber<C>, appliedVersion: number): Promise<void> {
    return this.serial(async () => {
      const prev = await this.o.status.get(sub.id);
      await this.o.status.put({
        id: sub.id, region: sub.region, connected: true, replica: this.replica, appliedVersion,
        lastError: prev?.lastError ?? null, lastErrorAt: prev?.lastErrorAt ?? null, lastSeen: this.o.clock.now(),
      });
    });
  }

  /**
   * An ACK (no `error`) or NACK of the snapshot with `nonce`. Answers to anything but the pending
   * nonce are stale and ignored (undefined); otherwise returns the answered snapshot. After a NACK
   * the next change, or a reconnect, sends again even if the content is the same.
   */
  answer(sub: Subscriber<C>, nonce: string, appliedVersion: number, error?: string): Promise<{ nonce: string; version: number } | undefined> {
    return this.serial(async () => {
      const answered = sub.pending;
      if (!nonce || nonce !== answered?.nonce) return undefined;
      const prev = (await this.o.status.get(sub.id))!;
      const now = this.o.clock.now();
      if (error) {
        sub.sentHash = undefined;
        await this.o.status.put({ ...prev, connected: true, replica: this.replica, appliedVersion, lastError: error, lastErrorAt: now, lastSeen: now });
      } else {
        await this.o.status.put({ ...prev, connected: true, replica: this.replica, appliedVersion, lastError: null, lastErrorAt: null, lastSeen: now });
      }
      sub.pending = undefined;
      // A change waited for this answer: a round sends it (in full after a NACK).
      if (sub.behind) {
        sub.behind = false;
        this.notifyChanged();
      }
      return answered;
    });
  }

  /** Records every open stream as connected again, here (after others took this replica for dead). */
  reassert(): Promise<void> {
    return this.serial(async () => {
      for (const sub of this.subs.values()) {
        const prev = await this.o.status.get(sub.id);
        if (prev) await this.o.status.put({ ...prev, connected: true, replica: this.replica, lastSeen: this.o.clock.now() });
      }
    });
  }

  /** The stream ended; false when it was already replaced by a newer stream of the same id. */
  disconnect(sub: Subscriber<C>): Promise<boolean> {
    if (this.subs.get(sub.id) !== sub) return Promise.resolve(false);
    this.subs.delete(sub.id);
    return this.serial(async () => {
      // Only while this replica still holds it: the host may have said hello to another already.
      await this.o.status.release(this.replica, sub.id, this.o.clock.now());
      return true;
    });
  }

  /** Schedules a round for every open stream; changes within the coalescing window share it. */
  notifyChanged(): void {
    if (this.timer || this.closed) return;
    this.timer = this.o.clock.setTimeout(() => {
      this.timer = undefined;
      this.serial(async () => {
        if (this.closed) return;
        const t0 = performance.now();
        const round = await this.o.source.read([...this.subs.values()]);
        for (const s of this.subs.values()) await this.send(s, round, false);
        this.o.onRound?.(performance.now() - t0);
      }).catch((err) => this.o.onError?.(err));
    }, this.o.coalesceMs ?? 10);
  }

  /**
   * Sends `sub` its current content now, unless it already has it (`force` sends anyway).
   * `holds` is the version the subscriber said it serves (its hello), which a source may resume from.
   */
  push(sub: Subscriber<C>, force = false, holds = 0): Promise<Snapshot<C> | undefined> {
    return this.serial(async () => {
      const round = await this.o.source.read([...this.subs.values()]);
      const src = this.o.source;
      const resumed = !force && holds > 0 && sub.incremental && src.hash ? src.resume?.(round, sub, holds) : undefined;
      if (resumed) return this.deliver(sub, round, src.hash!(round, sub), resumed);
      return this.send(sub, round, force);
    });
  }

  /** Ends every stream; the hosts this replica held read disconnected once `idle()` resolves. */
  close(): void {
    this.closed = true;
    this.timer?.cancel();
    this.timer = undefined;
    for (const s of this.subs.values()) s.stream.end();
    this.subs.clear();
    void this.serial(() => this.o.status.release(this.replica, undefined, this.o.clock.now())).catch((err) => this.o.onError?.(err));
  }

  private async send(sub: Subscriber<C>, round: R, force: boolean): Promise<Snapshot<C> | undefined> {
    if (sub.incremental && sub.pending) {
      sub.behind = true;
      return undefined;
    }
    const src = this.o.source;
    let content: C | undefined;
    let hash: string;
    if (src.hash) hash = src.hash(round, sub);
    else hash = contentHash((content = src.select(round, sub)));
    if (!force && hash === sub.sentHash) return undefined;
    // A delta only on top of content the subscriber holds; after a NACK or on connect, whole.
    if (sub.incremental && src.delta && sub.sentHash !== undefined && !force) content = src.delta(round, sub);
    else content ??= src.select(round, sub);
    return this.deliver(sub, round, hash, content);
  }

  private async deliver(sub: Subscriber<C>, round: R, hash: string, content: C): Promise<Snapshot<C>> {
    const snapshot = { version: await this.o.source.version(round, sub, hash), nonce: randomUUID(), content };
    sub.sentHash = hash;
    sub.pending = { nonce: snapshot.nonce, version: snapshot.version };
    sub.stream.send(snapshot);
    return snapshot;
  }
}
