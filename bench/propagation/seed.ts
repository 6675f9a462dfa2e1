/**
 * `bench:propagation --seed store`: NodeBalancers written straight into a stopped control plane's
 * database, for sizes the REST API would take too long to create on a busy machine. Each copies
 * the configs and nodes of a NodeBalancer the API created (`template`), with the next free
 * address of the pool, through the same repository the control plane uses; the control plane,
 * started again on the folder, builds them all once as after any restart.
 */
import { join } from 'node:path';
import { openDatabase } from '../../control-plane/store/sqlite/database.js';
import { sqliteNodeBalancers } from '../../control-plane/store/sqlite/nodebalancer-repository.js';
import { formatIpv4, parseCidr } from '../../lib/ipv4.js';
import type { NbConfig, NbNode } from '../../control-plane/domain/nodebalancers/model.js';

export async function seedNodeBalancers(stateDir: string, pool: string, template: number, from: number, count: number): Promise<void> {
  const db = openDatabase(join(stateDir, 'control-plane.sqlite'));
  try {
    const repo = sqliteNodeBalancers(db);
    const tpl = await repo.get(template);
    if (!tpl) throw new Error(`template NodeBalancer ${template} not found`);
    const configs: { c: NbConfig; nodes: NbNode[] }[] = [];
    for (const c of await repo.configs(template)) configs.push({ c, nodes: await repo.nodes(c.id) });
    const range = parseCidr(pool)!;
    const used = new Set(db.prepare('SELECT ip FROM addresses WHERE pool = ?').pluck().all(pool) as string[]);
    let next = 2;
    const freeAddress = (): string => {
      for (; next < range.size - 1; next++) {
        const n = (range.network + next) >>> 0;
        const ip = formatIpv4(n);
        if ((n & 255) === 0 || (n & 255) === 255 || used.has(ip)) continue;
        next++;
        return ip;
      }
      throw new Error(`pool ${pool} is full`);
    };
    const insertAddress = db.prepare('INSERT INTO addresses (ip, pool, owner_type, owner_id) VALUES (?, ?, ?, ?)');
    await repo.transaction(async () => {
      for (let i = from; i < count; i++) {
        const nb = await repo.create({ ...tpl, label: `scale-${String(i).padStart(5, '0')}` });
        const ip = freeAddress();
        insertAddress.run(ip, pool, 'nodebalancer', nb.id);
        await repo.setIpv4(nb.id, ip);
        for (const { c, nodes } of configs) {
          const { id: _id, nodebalancerId: _nb, ...fields } = c;
          const cfg = await repo.createConfig(nb.id, fields);
          for (const n of nodes) await repo.createNode(nb.id, cfg.id, { label: n.label, address: n.address, weight: n.weight, mode: n.mode });
        }
      }
    });
  } finally {
    db.close();
  }
}
