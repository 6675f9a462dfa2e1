import { createServer } from 'node:net';

function toInt(ip: string): number {
  return ip.split('.').reduce((a, o) => ((a << 8) | Number(o)) >>> 0, 0);
}
function toIp(n: number): string {
  return [24, 16, 8, 0].map((s) => (n >>> s) & 255).join('.');
}

async function bindable(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, host, () => s.close(() => resolve(true)));
  });
}

/**
 * Node addresses from a loopback pool (default 127.79.0.0/16): each node listens on its own
 * address and port 3306, so `members` can name nodes by address. Skips addresses already
 * taken by this agent and any whose port is in use on the host (another agent, a stray server).
 */
export async function allocateAddresses(pool: string, count: number, taken: Set<string>, port = 3306): Promise<string[]> {
  const [base, bits] = pool.split('/');
  const prefix = Number(bits ?? 32);
  const start = toInt(base!) & (prefix === 0 ? 0 : (~0 << (32 - prefix)) >>> 0);
  const size = 2 ** (32 - prefix);
  const out: string[] = [];
  for (let i = 1; i < size - 1 && out.length < count; i++) {
    const ip = toIp((start + i) >>> 0);
    const last = Number(ip.split('.')[3]);
    if (last === 0 || last === 255 || taken.has(ip)) continue;
    if (await bindable(ip, port)) out.push(ip);
  }
  if (out.length < count) throw new Error(`address pool ${pool} has no ${count} free addresses`);
  return out;
}
