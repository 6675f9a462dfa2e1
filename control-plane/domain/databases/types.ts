/**
 * Database plans (/databases/types), shaped like the real 2024 list: the same ids, memory, disk
 * and vCPUs, and per-node-count prices in USD. A type maps to the limits the agent applies to
 * every node (memory, CPU) and to the disk quota; `total_disk_size_gb` is disk / 1024.
 */
export interface DatabaseTypeEntry {
  id: string;
  label: string;
  class: 'nanode' | 'standard' | 'dedicated';
  memory: number;
  disk: number;
  vcpus: number;
  /** [1 node, 2 nodes, 3 nodes] as [hourly, monthly]. */
  prices: [number, number][];
}

const t = (id: string, label: string, cls: DatabaseTypeEntry['class'], memory: number, disk: number, vcpus: number, prices: [number, number][]): DatabaseTypeEntry =>
  ({ id, label, class: cls, memory, disk, vcpus, prices });

export const databaseTypes: DatabaseTypeEntry[] = [
  t('g6-nanode-1', 'DBaaS - Nanode 1GB', 'nanode', 1024, 25600, 1, [[0.0225, 15], [0.0375, 25], [0.0525, 35]]),
  t('g6-standard-1', 'DBaaS - Linode 2GB', 'standard', 2048, 51200, 1, [[0.045, 30], [0.075, 50], [0.105, 70]]),
  t('g6-standard-2', 'DBaaS - Linode 4GB', 'standard', 4096, 81920, 2, [[0.09, 60], [0.15, 100], [0.21, 140]]),
  t('g6-standard-4', 'DBaaS - Linode 8GB', 'standard', 8192, 163840, 4, [[0.18, 120], [0.3, 200], [0.42, 280]]),
  t('g6-standard-6', 'DBaaS - Linode 16GB', 'standard', 16384, 327680, 6, [[0.36, 240], [0.6, 400], [0.84, 560]]),
  t('g6-standard-8', 'DBaaS - Linode 32GB', 'standard', 32768, 655360, 8, [[0.72, 480], [1.2, 800], [1.68, 1120]]),
  t('g6-standard-16', 'DBaaS - Linode 64GB', 'standard', 65536, 1310720, 16, [[1.44, 960], [2.4, 1600], [3.336, 2224]]),
  t('g6-standard-20', 'DBaaS - Linode 96GB', 'standard', 98304, 1966080, 20, [[2.16, 1440], [3.6, 2400], [5.04, 3360]]),
  t('g6-standard-24', 'DBaaS - Linode 128GB', 'standard', 131072, 2621440, 24, [[2.88, 1920], [4.8, 3200], [6.72, 4480]]),
  t('g6-standard-32', 'DBaaS - Linode 192GB', 'standard', 196608, 3932160, 32, [[4.32, 2880], [7.2, 4800], [10.08, 6720]]),
  t('g6-dedicated-2', 'DBaaS - Dedicated 4GB', 'dedicated', 4096, 81920, 2, [[0.0975, 65], [0.195, 130], [0.2925, 195]]),
  t('g6-dedicated-4', 'DBaaS - Dedicated 8GB', 'dedicated', 8192, 163840, 4, [[0.195, 130], [0.39, 260], [0.585, 390]]),
  t('g6-dedicated-8', 'DBaaS - Dedicated 16GB', 'dedicated', 16384, 327680, 8, [[0.39, 260], [0.78, 520], [1.17, 780]]),
  t('g6-dedicated-16', 'DBaaS - Dedicated 32GB', 'dedicated', 32768, 655360, 16, [[0.78, 520], [1.56, 1040], [2.34, 1560]]),
  t('g6-dedicated-32', 'DBaaS - Dedicated 64GB', 'dedicated', 65536, 1310720, 32, [[1.56, 1040], [3.12, 2080], [4.68, 3120]]),
  t('g6-dedicated-48', 'DBaaS - Dedicated 96GB', 'dedicated', 98304, 1966080, 48, [[2.34, 1560], [4.68, 3120], [7.02, 4680]]),
  t('g6-dedicated-50', 'DBaaS - Dedicated 128GB', 'dedicated', 131072, 2560000, 50, [[3.12, 2080], [6.24, 4160], [9.36, 6240]]),
  t('g6-dedicated-56', 'DBaaS - Dedicated 256GB', 'dedicated', 262144, 5120000, 56, [[6.24, 4160], [12.48, 8320], [18.72, 12480]]),
  t('g6-dedicated-64', 'DBaaS - Dedicated 512GB', 'dedicated', 524288, 7372800, 64, [[12.48, 8320], [24.96, 16640], [37.44, 24960]]),
];

/** The cluster sizes a create accepts (validation.ts refuses the others). */
export const CLUSTER_SIZES: readonly number[] = [1, 3];

export function findType(id: string): DatabaseTypeEntry | undefined {
  return databaseTypes.find((x) => x.id === id);
}

/** The wire shape: keys exactly class, disk, engines, id, label, memory, vcpus. */
export function typeToWire(x: DatabaseTypeEntry): Record<string, unknown> {
  // Only the cluster sizes a create accepts (1 and 3) are offered; 2 is priced but refused.
  const engines = x.prices.map(([hourly, monthly], i) => ({ quantity: i + 1, price: { hourly, monthly } })).filter((e) => CLUSTER_SIZES.includes(e.quantity));
  return { class: x.class, disk: x.disk, engines: { mysql: engines, postgresql: engines }, id: x.id, label: x.label, memory: x.memory, vcpus: x.vcpus };
}
