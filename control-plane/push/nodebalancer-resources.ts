import { createHash } from 'node:crypto';
import type { NodeBalancerRepository } from '../domain/nodebalancers/repository.js';
import type { NodeBalancer as NbProto } from '../../proto/gen/fulcrum/v1/NodeBalancer.js';
import { regionServed } from '../domain/regions.js';
import { buildAll, buildOne } from './snapshot-builder.js';

/** One NodeBalancer as data planes receive it, with what identifies its content. */
export interface BuiltNodeBalancer {
  region: string;
  nb: NbProto;
  /** Hash of the proto content without its resource version. */
  hash: string;
}

const DIGEST_BYTES = 32;

function digestOf(id: number, hash: string): Buffer {
  return createHash('sha256').update(`${id}:${hash}`).digest();
}

function xorInto(acc: Buffer, d: Buffer): void {
  for (let i = 0; i < DIGEST_BYTES; i++) acc[i]! ^= d[i]!;
}

/**
 * Every NodeBalancer in proto shape, built once and kept until a write to it invalidates its id
 * (docs/dataplane.md, "Incremental snapshots"). `refresh` rebuilds only the invalidated ones, so
 * a push round costs time in proportion to the change, not to the number of NodeBalancers.
 *
 * What a data plane of a region should hold is summarised by a digest per region (and one for
 * `*`): the XOR of one SHA-256 per NodeBalancer over its id and content hash. A NodeBalancer's
 * change updates it in constant time, and equal sets of NodeBalancers give equal digests.
 */
export class NodeBalancerResources {
  private readonly built = new Map<number, BuiltNodeBalancer>();
  private readonly invalid = new Set<number>();
  private loaded = false;
  private readonly digests = new Map<string, Buffer>();

  constructor(private readonly repo: NodeBalancerRepository) {}

  /** A write changed (or deleted) this NodeBalancer: the next refresh rebuilds it. */
  invalidate(id: number): void {
    this.invalid.add(id);
  }

  /** Unknown writes: the next refresh rebuilds everything (still sending only what differs). */
  invalidateAll(): void {
    this.loaded = false;
  }

  /**
   * Brings the cache up to date with the store. Returns the ids whose content was added,
   * changed or removed; `stamp` receives them once the caller knows the version they belong to.
   */
  async refresh(): Promise<number[]> {
    const changed: number[] = [];
    if (!this.loaded) {
      // Marked first: an invalidateAll while the store is read makes the next refresh load again.
      this.loaded = true;
      this.invalid.clear();
      const seen = new Set<number>();
      for (const b of await buildAll(this.repo)) {
        seen.add(b.nb.id as number);
        if (this.put(b)) changed.push(b.nb.id as number);
      }
      for (const id of [...this.built.keys()]) if (!seen.has(id)) changed.push(this.remove(id));
      return changed;
    }
    // Taken first: ids invalidated while the store is read wait for the next refresh.
    const ids = [...this.invalid];
    this.invalid.clear();
    for (const id of ids) {
      const row = await this.repo.get(id);
      if (!row) {
        if (this.built.has(id)) changed.push(this.remove(id));
        continue;
      }
      if (this.put(await buildOne(this.repo, row))) changed.push(id);
    }
    return changed;
  }

  /** Records `version` as the resource version of NodeBalancers just changed. */
  stamp(ids: readonly number[], version: number): void {
    for (const id of ids) {
      const b = this.built.get(id);
      if (b) b.nb.version = version;
    }
  }

  get(id: number): BuiltNodeBalancer | undefined {
    return this.built.get(id);
  }

  /** The NodeBalancers a data plane of `region` serves (a full snapshot's list). */
  servedIn(region: string): BuiltNodeBalancer[] {
    const out: BuiltNodeBalancer[] = [];
    for (const b of this.built.values()) if (regionServed(region, b.region)) out.push(b);
    return out;
  }

  /** The digest of what a data plane of `region` serves. */
  digest(region: string): string {
    return (this.digests.get(region === '*' ? '*' : `r:${region}`) ?? Buffer.alloc(DIGEST_BYTES)).toString('hex');
  }

  get size(): number {
    return this.built.size;
  }

  /** Stores a freshly built NodeBalancer; false when its content did not change. */
  private put(b: { region: string; nb: NbProto }): boolean {
    const id = b.nb.id as number;
    const hash = createHash('sha256').update(JSON.stringify(b.nb)).digest('hex');
    const prev = this.built.get(id);
    if (prev && prev.hash === hash && prev.region === b.region) return false;
    if (prev) this.account(id, prev);
    const next = { region: b.region, nb: b.nb, hash };
    this.built.set(id, next);
    this.account(id, next);
    return true;
  }

  private remove(id: number): number {
    this.account(id, this.built.get(id)!);
    this.built.delete(id);
    return id;
  }

  /** Adds (or, applied twice, removes) a NodeBalancer's digest in its region's and in `*`'s. */
  private account(id: number, b: BuiltNodeBalancer): void {
    const d = digestOf(id, b.hash);
    for (const key of ['*', `r:${b.region}`]) {
      let acc = this.digests.get(key);
      if (!acc) this.digests.set(key, (acc = Buffer.alloc(DIGEST_BYTES)));
      xorInto(acc, d);
    }
  }
}
