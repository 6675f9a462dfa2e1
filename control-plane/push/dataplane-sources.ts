import { isIpv4, unmapIpv4 } from '../../lib/ipv4.js';
import type { KeyValueRepository } from '../domain/ports.js';
import { regionServed } from '../domain/regions.js';

const KEY = 'dataplane_endpoint_sources';
/**
 * Most data planes remembered. Only certified data planes connect, unless the operator runs
 * with --insecure-grpc, where any peer may claim any id: the oldest entries then make room.
 */
const MAX_SOURCES = 1000;

interface Source {
  region: string;
  address: string;
}

/**
 * The addresses the data planes dial database members from (docs/security/mysql.md): each
 * data plane's own word in its hello (it is authenticated by its certificate), else the address
 * its config stream comes from. Remembered across restarts and disconnects, so a data plane that
 * is briefly away (or a control plane that restarts) does not lock its endpoints out of the
 * members; a revoked data plane is forgotten.
 */
export class DataplaneSources {
  private sources: Record<string, Source> = {};

  constructor(private readonly kv: KeyValueRepository, private readonly onChange: () => void) {}

  /** Reads what the store remembers; called once before the streams are served. */
  async load(): Promise<void> {
    try {
      this.sources = JSON.parse((await this.kv.get(KEY)) ?? '{}') as Record<string, Source>;
    } catch {
      // An unreadable record is rebuilt as data planes connect.
    }
  }

  /** Records where a data plane's member connections come from; `peer` is the stream's "host:port". */
  async record(id: string, region: string, claimed: string, peer: string): Promise<void> {
    const address = claimed && isIpv4(claimed) ? claimed : peerAddress(peer);
    if (!address) return;
    const prev = this.sources[id];
    if (prev && prev.address === address && prev.region === region) return;
    if (!prev) {
      const ids = Object.keys(this.sources);
      for (const old of ids.slice(0, Math.max(0, ids.length - MAX_SOURCES + 1))) delete this.sources[old];
    }
    this.sources[id] = { region, address };
    await this.save();
  }

  /** The data planes remembered. */
  ids(): string[] {
    return Object.keys(this.sources);
  }

  async forget(id: string): Promise<void> {
    if (!this.sources[id]) return;
    delete this.sources[id];
    await this.save();
  }

  /** The source addresses of the data planes serving `region`, sorted and unique. */
  forRegion(region: string): string[] {
    const out = new Set<string>();
    for (const s of Object.values(this.sources)) if (regionServed(s.region, region)) out.add(s.address);
    return [...out].sort();
  }

  private async save(): Promise<void> {
    await this.kv.set(KEY, JSON.stringify(this.sources));
    this.onChange();
  }
}

/** "127.0.0.1:5000", "[::ffff:10.0.0.1]:5000" or "ipv4:..." -> the IPv4 address, if any. */
export function peerAddress(peer: string): string | undefined {
  const bare = peer.replace(/^ipv[46]:/, '');
  const host = bare.startsWith('[') ? bare.slice(1, bare.indexOf(']')) : bare.slice(0, bare.lastIndexOf(':'));
  const v4 = unmapIpv4(host);
  return isIpv4(v4) ? v4 : undefined;
}
