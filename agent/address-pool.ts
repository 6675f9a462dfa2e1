import { createServer } from 'node:net';
import { formatIpv4, parseCidr } from '../lib/ipv4.js';

async function bindable(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, host, () => s.close(() => resolve(true)));
  });
}

/**
 * Node addresses from a pool (default 127.79.0.0/16, `--node-pool`): each node listens on its own
 * address and port 3306, so `members` can name nodes by address. Skips addresses already
 * taken by this agent and any whose port is in use on the host (another agent, a stray server).
 */
export async function allocateAddresses(pool: string, count: number, taken: Set<string>, port = 3306): Promise<string[]> {
  const range = parseCidr(pool);
  if (!range) throw new Error(`address pool ${pool} is not an IPv4 CIDR`);
  const out: string[] = [];
  for (let i = 1; i < range.size - 1 && out.length < count; i++) {
    const ip = formatIpv4((range.network + i) >>> 0);
    const last = Number(ip.split('.')[3]);
    if (last === 0 || last === 255 || taken.has(ip)) continue;
    if (await bindable(ip, port)) out.push(ip);
  }
  if (out.length < count) throw new Error(`address pool ${pool} has no ${count} free addresses`);
  return out;
}
