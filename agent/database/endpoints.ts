import { isIpv4 } from '../../lib/ipv4.js';
import type { Logger } from '../../lib/logger.js';
import { q, withAdmin, type AdminTarget } from '../mysql/admin.js';

/**
 * The value of proxy_protocol_networks every member of a database runs with (docs/security/
 * mysql.md): its Unix socket (`localhost`, the agent's own sessions) and the addresses the
 * data planes dial members from, which the control plane sends as `proxy_sources`. The
 * endpoints themselves are served by the data planes (docs/databases.md, "Database endpoints").
 */
export function proxyNetworks(sources: readonly string[]): string {
  const addrs = [...new Set(sources.filter((s) => isIpv4(s)))].sort();
  return ['localhost', ...addrs].join(',');
}

/** Compares two values of proxy_protocol_networks as sets (the server may reorder or respace). */
export function sameNetworks(a: string, b: string): boolean {
  const norm = (v: string) => v.split(',').map((x) => x.trim().toLowerCase()).filter(Boolean).sort().join(',');
  return norm(a) === norm(b);
}

/** Reads a member's proxy_protocol_networks. */
export async function readProxyNetworks(c: Parameters<typeof q>[0]): Promise<string> {
  const rows = await q(c, 'SELECT @@GLOBAL.proxy_protocol_networks AS v');
  return String(rows[0]?.v ?? '');
}

/**
 * Sets proxy_protocol_networks on the running members (the variable is dynamic: no restart).
 * A member that (re)starts comes up with the option file's `localhost` only; the next
 * observation sees the difference and this runs again.
 */
export async function applyProxyNetworks(log: Logger, members: { index: number; target: AdminTarget }[], value: string): Promise<void> {
  for (const m of members) {
    try {
      await withAdmin(m.target, async (c) => {
        if (!sameNetworks(await readProxyNetworks(c), value)) await q(c, 'SET GLOBAL proxy_protocol_networks = ?', [value]);
      });
    } catch (err) {
      log.warn({ err, node: m.index }, 'could not set proxy_protocol_networks');
    }
  }
}
