/**
 * Regions come from configuration. Each has the capabilities the real API lists; a NodeBalancer
 * may only be created where `NodeBalancers` is listed, a database where `Managed Databases` is.
 */
export interface Region {
  id: string;
  label: string;
  country: string;
  capabilities: string[];
  status: 'ok' | 'outage';
  resolvers: { ipv4: string; ipv6: string };
}

export const defaultRegions: Region[] = [
  {
    id: 'us-east',
    label: 'Newark, NJ, USA',
    country: 'us',
    capabilities: ['NodeBalancers', 'Managed Databases'],
    status: 'ok',
    resolvers: { ipv4: '127.0.0.53', ipv6: '::1' },
  },
  {
    id: 'lab-local',
    label: 'Fulcrum lab (this machine)',
    country: 'us',
    capabilities: ['NodeBalancers', 'Managed Databases'],
    status: 'ok',
    resolvers: { ipv4: '127.0.0.53', ipv6: '::1' },
  },
];

export class RegionCatalogue {
  constructor(private readonly regions: Region[] = defaultRegions) {}
  list(): Region[] {
    return this.regions;
  }
  get(id: string): Region | undefined {
    return this.regions.find((r) => r.id === id);
  }
  has(id: string, capability: string): boolean {
    return this.get(id)?.capabilities.includes(capability) ?? false;
  }
}

/**
 * Whether a data plane or agent serving `served` serves something in `region`: `*` serves every
 * region (the lab runs one of each for everything).
 */
export function regionServed(served: string, region: string): boolean {
  return served === '*' || served === region;
}
