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
 *
 * Control-plane replicas share the one record: each change is read, merged and written in one
 * transaction, so a replica never writes back a list that lacks what another replica recorded
 * meanwhile (the data planes connect to different replicas), and `load` picks up the others'.
 */
export class DataplaneSources {
  private sources: Record<string, Source> = {};

  constructor(private readonly kv: KeyValueRepository, private readonly onChange: () => void) {}

  /** Reads what the store remembers: before the streams are served, and when another replica changed it. */
  async load(): Promise<void> {
    this.sources = await this.read();
  }

  /** Records where a data plane's member connections come from; `peer` is the stream's "host:port". */
  async record(id: string, region: string, claimed: string, peer: string): Promise<void> {
    const address = claimed && isIpv4(claimed) ? claimed : peerAddress(peer);
    if (!address) return;
    const prev = this.sources[id];
    if (prev && prev.address === address && prev.region === region) return;
    await this.change((all) => {
      const had = all[id];
      if (had && had.address === address && had.region === region) return false;
      if (!had) {
        const ids = Object.keys(all);
        for (const old of ids.slice(0, Math.max(0, ids.length - MAX_SOURCES + 1))) delete all[old];
      }
      all[id] = { region, address };
      return true;
    });
  }

  /** The data planes remembered. */
  ids(): string[] {
    return Object.keys(this.sources);
  }

  async forget(id: string): Promise<void> {
    await this.change((all) => {
      if (!all[id]) return false;
      delete all[id];
      return true;
    });
  }

  /** The source addresses of the data planes serving `region`, sorted and unique. */
  forRegion(region: string): string[] {
    const out = new Set<string>();
    for (const s of Object.values(this.sources)) if (regionServed(s.region, region)) out.add(s.address);
    return [...out].sort();
  }

  /** Applies `edit` to the stored record (not this replica's copy of it) and keeps the result. */
  private async change(edit: (all: Record<string, Source>) => boolean): Promise<void> {
    const apply = async (): Promise<boolean> => {
      const all = await this.read();
      const changed = edit(all);
      if (changed) await this.kv.set(KEY, JSON.stringify(all));
      this.sources = all;
      return changed;
    };
    const changed = this.kv.atomically ? await this.kv.atomically(apply) : await apply();
    if (changed) this.onChange();
  }

  private async read(): Promise<Record<string, Source>> {
    try {
      return JSON.parse((await this.kv.get(KEY)) ?? '{}') as Record<string, Source>;
    } catch {
      // An unreadable record is rebuilt as data planes connect.
      return {};
    }
  }
}

/** "127.0.0.1:5000", "[::ffff:10.0.0.1]:5000" or "ipv4:..." -> the IPv4 address, if any. */
export function peerAddress(peer: string): string | undefined {
  const bare = peer.replace(/^ipv[46]:/, '');
  const host = bare.startsWith('[') ? bare.slice(1, bare.indexOf(']')) : bare.slice(0, bare.lastIndexOf(':'));
  const v4 = unmapIpv4(host);
  return isIpv4(v4) ? v4 : undefined;
}
