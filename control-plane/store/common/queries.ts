/**
 * SQL and allocation rules both adapters use as they are: the statement text where SQLite and
 * PostgreSQL read it alike, the order addresses are handed out in.
 */

import { formatIpv4 } from '../../../lib/ipv4.js';
import type { EventRepository, EventScope } from '../../domain/events/repository.js';

/** The tables whose ids come from id_sequences and are never reused (migrations 102 and 240). */
export type SequenceName = 'nodebalancers' | 'nb_configs' | 'nb_nodes' | 'tokens' | 'databases';

/**
 * The WHERE clause of an event scope. The ids are inlined: they are integers (checked here), and
 * a restricted user may hold more grants than a statement takes parameters.
 */
export function eventScopeWhere(scope: EventScope | undefined): string {
  if (!scope?.entities) return '';
  const ids = (list: readonly number[]) => list.filter((n) => Number.isSafeInteger(n)).join(', ') || 'NULL';
  return `WHERE entity_type IS NULL OR (entity_type = 'nodebalancer' AND entity_id IN (${ids(scope.entities.nodebalancer)}))` +
    ` OR (entity_type = 'database' AND entity_id IN (${ids(scope.entities.database)}))`;
}

/** The columns an event patch sets, with their stored values. */
export function eventPatchColumns(p: Parameters<EventRepository['update']>[1]): [string, unknown][] {
  const out: [string, unknown][] = [];
  if (p.status !== undefined) out.push(['status', p.status]);
  if (p.percentComplete !== undefined) out.push(['percent_complete', p.percentComplete]);
  if (p.duration !== undefined) out.push(['duration', p.duration]);
  if (p.message !== undefined) out.push(['message', p.message]);
  if (p.seen !== undefined) out.push(['seen', p.seen ? 1 : 0]);
  if (p.read !== undefined) out.push(['read', p.read ? 1 : 0]);
  return out;
}

/**
 * Free addresses of an IPv4 pool, lowest first. The network address and the one after it (.0 and
 * .1 of the pool) are skipped so that a pool on loopback never hands out an address that
 * something else on the host already uses, and so is every .0 and .255.
 */
export function* ipv4Candidates(range: { network: number; size: number }, used: Set<string>): Generator<string> {
  for (let i = 2; i < range.size - 1; i++) {
    const n = (range.network + i) >>> 0;
    const last = n & 255;
    if (last === 0 || last === 255) continue;
    const ip = formatIpv4(n);
    if (!used.has(ip)) yield ip;
  }
}

/**
 * Free addresses of an IPv6 range, lowest first. As for IPv4, the range's first two addresses
 * are skipped (the router's on a real /64, something of the host's on loopback) unless the range
 * is that small; only the addresses in use are walked past, so a /64 is never enumerated.
 */
export function* ipv6Candidates(range: { network: bigint; size: bigint }, used: Set<bigint | undefined>): Generator<bigint> {
  const first = range.size > 2n ? 2n : 0n;
  for (let i = first; i < range.size && i < first + BigInt(used.size) + 1n; i++) {
    const n = range.network + i;
    if (!used.has(n)) yield n;
  }
}

/** One member-report upsert (SQLite and PostgreSQL read `excluded` alike); %N is parameter N. */
export const PUT_MEMBER_REPORT = `INSERT INTO database_member_reports (database_id, member, agent_id, state, role, gtid, address, reported)
  VALUES (%1, %2, %3, %4, %5, %6, %7, %8) ON CONFLICT (database_id, member) DO UPDATE SET agent_id = excluded.agent_id, state = excluded.state,
  role = excluded.role, gtid = excluded.gtid, address = excluded.address, reported = excluded.reported`;

/** A certificate's columns plus whether its host is marked removed (rows.ts, CertRow). */
export const CERT_STATE = `SELECT c.*, EXISTS (SELECT 1 FROM fleet_removed_hosts r WHERE r.role = c.role AND r.host_id = c.host_id) AS host_removed
  FROM fleet_certificates c`;
