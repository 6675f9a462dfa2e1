import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';

const NONLOCAL_BIND = '/proc/sys/net/ipv6/ip_nonlocal_bind';

/**
 * The lab's IPv6 range for NodeBalancers (docs/architecture.md, the lab): a unique-local /64 of
 * its own, derived from the state folder, so two labs on one host never share one.
 */
export function labIpv6Prefix(state: string): string {
  const h = createHash('sha256').update(`fulcrum-lab:${state}`).digest('hex');
  // Groups written as `ip -6 route` prints them (no leading zeros), so the range reads the same everywhere.
  const group = (from: number) => parseInt(h.slice(from, from + 4), 16).toString(16);
  return `fd${h.slice(0, 2)}:${group(2)}:${group(6)}:${group(10)}::/64`;
}

/**
 * Makes every address of `prefix` local on `lo` (a `local` route: no address per NodeBalancer)
 * and lets programs bind such addresses (`net.ipv6.ip_nonlocal_bind=1`, the setting pair mode
 * needs for IPv4; left on at stop, since another lab on the host may rely on it). Needs root or
 * CAP_NET_ADMIN; returns why it could not, or undefined when the range is ready.
 */
export function prepareLabIpv6(prefix: string): string | undefined {
  const route = spawnSync('ip', ['-6', 'route', 'replace', 'local', prefix, 'dev', 'lo'], { encoding: 'utf8' });
  if (route.error || route.status !== 0) return `ip -6 route replace local ${prefix} dev lo failed: ${route.error?.message ?? route.stderr.trim()}`;
  try {
    if (readFileSync(NONLOCAL_BIND, 'utf8').trim() !== '1') writeFileSync(NONLOCAL_BIND, '1');
  } catch (err) {
    releaseLabIpv6(prefix);
    return `cannot set net.ipv6.ip_nonlocal_bind=1: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`;
  }
  return undefined;
}

/** Removes the lab's route again (at stop); quiet when it is gone already. */
export function releaseLabIpv6(prefix: string): void {
  spawnSync('ip', ['-6', 'route', 'del', 'local', prefix, 'dev', 'lo'], { encoding: 'utf8' });
}
