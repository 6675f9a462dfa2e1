import { parseCidr, type Ipv4Range } from '../../lib/ipv4.js';
import { FulcrumError } from '../../lib/errors.js';

/**
 * Where a kind of address (NodeBalancer addresses, database endpoints) comes from, per region
 * (docs/multi-host.md, "Address pools"). The operator writes one CIDR for every region
 * (`198.18.100.0/24`, the single-pool form), or `region=CIDR` entries, comma-separated, with at
 * most one bare CIDR as the pool of the regions not named. Pools live on the hosts' network, where
 * the data planes that serve a region can hold their addresses.
 */
export class AddressPools {
  private constructor(
    private readonly byRegion: ReadonlyMap<string, string>,
    private readonly fallback: string | undefined,
    private readonly what: string,
  ) {}

  /** Parses a flag's text; throws an Error naming the flag's content when it is malformed. */
  static parse(spec: string, what: string): AddressPools {
    const byRegion = new Map<string, string>();
    let fallback: string | undefined;
    for (const entry of spec.split(',').map((s) => s.trim()).filter(Boolean)) {
      const eq = entry.indexOf('=');
      const region = eq < 0 ? undefined : entry.slice(0, eq).trim();
      const cidr = eq < 0 ? entry : entry.slice(eq + 1).trim();
      const range = parseCidr(cidr);
      if (!range || !cidr.includes('/') || range.prefix > 30) throw new Error(`${what} pool ${JSON.stringify(entry)}: expected a.b.c.d/n (n <= 30) or region=a.b.c.d/n`);
      if (region === undefined) {
        if (fallback !== undefined) throw new Error(`${what} pools: more than one pool without a region`);
        fallback = cidr;
      } else {
        if (!/^[a-z0-9-]{1,64}$/.test(region)) throw new Error(`${what} pool ${JSON.stringify(entry)}: bad region id`);
        if (byRegion.has(region)) throw new Error(`${what} pools: region ${region} named twice`);
        byRegion.set(region, cidr);
      }
    }
    if (fallback === undefined && byRegion.size === 0) throw new Error(`${what} pools: none given`);
    const pools = new AddressPools(byRegion, fallback, what);
    assertDisjoint(pools.cidrs(), what);
    return pools;
  }

  /** Every pool's CIDR (for the backend networks Fulcrum refuses and overlap checks). */
  cidrs(): string[] {
    return [...new Set([...(this.fallback ? [this.fallback] : []), ...this.byRegion.values()])];
  }

  /** The pool a new address in `region` comes from; a 400 on `region` when none is configured. */
  forRegion(region: string): string {
    const cidr = this.byRegion.get(region) ?? this.fallback;
    if (cidr === undefined) throw FulcrumError.field('region', `No ${this.what} addresses are configured for region ${region}`);
    return cidr;
  }
}

function overlaps(a: Ipv4Range, b: Ipv4Range): boolean {
  return a.network < b.network + b.size && b.network < a.network + a.size;
}

/**
 * Addresses are allocated per pool text, so two overlapping pools could hand one address to two
 * owners: refused at start, across all kinds of pools.
 */
export function assertDisjoint(cidrs: string[], what: string): void {
  const ranges = cidrs.map((c) => [c, parseCidr(c)!] as const);
  for (let i = 0; i < ranges.length; i++) {
    for (let j = i + 1; j < ranges.length; j++) {
      if (overlaps(ranges[i]![1], ranges[j]![1])) throw new Error(`${what}: pools ${ranges[i]![0]} and ${ranges[j]![0]} overlap`);
    }
  }
}
