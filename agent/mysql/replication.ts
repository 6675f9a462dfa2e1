import { q, type AdminConnection } from './admin.js';
import { REPL_USER } from './accounts.js';

/** The primary no longer has the binlog a replica asks for (error 1236). */
export class BinlogPurgedError extends Error {}

/** What SHOW SLAVE STATUS says, in the agent's words (undefined when not a replica). */
export interface ReplicaStatus {
  masterHost: string;
  ioRunning: boolean;
  sqlRunning: boolean;
  secondsBehind: number | null;
  lastError: string;
  gtidIoPos: string;
}

export async function replicaStatus(c: AdminConnection): Promise<ReplicaStatus | undefined> {
  const rows = await q(c, 'SHOW SLAVE STATUS');
  const r = rows[0];
  if (!r || !r.Master_Host) return undefined;
  return {
    masterHost: String(r.Master_Host),
    ioRunning: r.Slave_IO_Running === 'Yes',
    sqlRunning: r.Slave_SQL_Running === 'Yes',
    secondsBehind: r.Seconds_Behind_Master === null ? null : Number(r.Seconds_Behind_Master),
    lastError: String(r.Last_IO_Error || r.Last_SQL_Error || ''),
    gtidIoPos: String(r.Gtid_IO_Pos ?? ''),
  };
}

export async function gtidCurrentPos(c: AdminConnection): Promise<string> {
  const rows = await q(c, 'SELECT @@gtid_current_pos AS p');
  return String(rows[0]?.p ?? '');
}

/** Highest sequence number in a GTID position (single replication domain 0 in our clusters). */
export function gtidSeq(pos: string): number {
  let best = 0;
  for (const part of pos.split(',')) {
    const seq = Number(part.trim().split('-')[2] ?? 0);
    if (Number.isFinite(seq) && seq > best) best = seq;
  }
  return best;
}

/**
 * Points a node at `primary` and starts replicating with GTIDs. `demote` is for a node that
 * has its own binlog history (an old primary): MASTER_DEMOTE_TO_SLAVE makes its current
 * position the starting point instead of failing with error 1236 (docs/agent.md §7).
 * TLS: the replica verifies the primary against the cluster CA it uses for itself (@@ssl_ca);
 * the server certificate names every node address. `acknowledge` (semi_synch) sets
 * rpl_semi_sync_slave_enabled before the IO thread starts, the moment MariaDB reads it: a member
 * being seeded acknowledges nothing (agent/database/seed-ack.ts).
 */
export async function configureReplica(
  c: AdminConnection,
  opts: { primaryHost: string; primaryPort: number; password: string; demote?: boolean; acknowledge?: boolean },
): Promise<void> {
  await c.query('SET GLOBAL read_only=ON');
  await c.query('SET GLOBAL rpl_semi_sync_master_enabled=OFF');
  await c.query('STOP SLAVE');
  const ca = String((await q(c, 'SELECT @@ssl_ca AS ca'))[0]?.ca ?? '');
  const parts = [
    'MASTER_HOST=?', 'MASTER_PORT=?', 'MASTER_USER=?', 'MASTER_PASSWORD=?', 'MASTER_CONNECT_RETRY=1',
    opts.demote ? 'MASTER_DEMOTE_TO_SLAVE=1' : 'MASTER_USE_GTID=slave_pos',
  ];
  const params: unknown[] = [opts.primaryHost, opts.primaryPort, REPL_USER, opts.password];
  if (ca) {
    parts.push('MASTER_SSL=1', 'MASTER_SSL_CA=?', 'MASTER_SSL_VERIFY_SERVER_CERT=1');
    params.push(ca);
  }
  await c.query(`CHANGE MASTER TO ${parts.join(', ')}`, params);
  if (opts.acknowledge !== undefined) await c.query(`SET GLOBAL rpl_semi_sync_slave_enabled=${opts.acknowledge ? 'ON' : 'OFF'}`);
  await c.query('START SLAVE');
}

/**
 * Makes a node the writable primary: no replication configuration left, semi-sync master side
 * on when the cluster is semi_synch, read_only off.
 */
export async function promote(c: AdminConnection, semiSync: boolean): Promise<void> {
  await c.query('STOP SLAVE');
  await c.query('RESET SLAVE ALL');
  await c.query(`SET GLOBAL rpl_semi_sync_master_enabled=${semiSync ? 'ON' : 'OFF'}`);
  await c.query('SET GLOBAL read_only=OFF');
}

/**
 * Waits until this node has applied `pos` (single domain: compares sequence numbers); false on
 * timeout. Polls instead of MASTER_GTID_WAIT, which was seen to return seconds late on 10.11.
 */
export async function waitForGtid(c: AdminConnection, pos: string, timeoutSec: number): Promise<boolean> {
  const want = gtidSeq(pos);
  if (want === 0) return true;
  const end = Date.now() + timeoutSec * 1000;
  for (;;) {
    if (gtidSeq(await gtidCurrentPos(c)) >= want) return true;
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 25));
  }
}
