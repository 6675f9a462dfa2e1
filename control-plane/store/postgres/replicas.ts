import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { Clock, Timer } from '../../../lib/clock.js';
import type { Logger } from '../../../lib/logger.js';
import type { ReplicaRepository } from '../../domain/ports.js';
import { parseChange, removalPayload, type Change, type ChangeKind, type Replicas } from '../replicas.js';

/** The channel every replica LISTENs on; payloads are `<kind>:<id>` (replicas.ts). */
const CHANNEL = 'fulcrum_changes';
/** Any fixed number other than the migration lock's: the advisory lock that is the lease. */
const LEASE_LOCK = 0x46554c45;
/** How often a replica without the lease tries for it, and the holder checks its session. */
const LEASE_TICK_MS = 1000;
/** How often a replica records that it is alive (and clears the hosts of replicas that are not). */
const HEARTBEAT_MS = 2000;
/**
 * A replica with no heartbeat for this long is taken as dead and its hosts read disconnected:
 * five missed beats, so a slow store write or a few seconds of clock skew between the replicas'
 * hosts do not clear a live replica's hosts.
 */
const DEAD_AFTER_MS = 10_000;

/**
 * Replicas over one PostgreSQL database (docs/architecture.md, "The store"). Two dedicated
 * sessions, outside the pool: one LISTENs for the other replicas' writes (and sends this
 * replica's own NOTIFYs, so its echo is told apart by the backend's process id), the other holds
 * the lease as a session advisory lock, which PostgreSQL releases when the session ends, so a
 * replica that dies (its connection closes, or TCP keepalive gives up on it) frees the lease for
 * the next replica's attempt. Through the pool, each replica also beats every HEARTBEAT_MS under
 * an id of its own and marks disconnected the hosts of replicas that stopped beating
 * (docs/architecture.md, "The streams").
 */
export function pgReplicas(url: string, opts: {
  clock: Clock; logger: Logger; beats: ReplicaRepository; tickMs?: number; heartbeatMs?: number; deadAfterMs?: number;
}): Replicas {
  const { clock, logger, beats } = opts;
  const id = randomUUID();
  const deadAfter = opts.deadAfterMs ?? DEAD_AFTER_MS;
  const handlers: ((c: Change) => void)[] = [];
  const revived: (() => void)[] = [];
  let beaten = false;
  let closed = false;
  let listener: pg.Client | undefined;
  let listening: Promise<void> | undefined;
  let leaseClient: pg.Client | undefined;
  let held = false;
  let trying = false;
  // A write published while the listener was down is sent as `all` once it is back.
  let missed = false;

  const emit = (c: Change) => {
    for (const h of handlers) h(c);
  };
  const client = () => {
    const c = new pg.Client({ connectionString: url, keepAlive: true });
    // A lost server must not crash the process: the next tick connects again.
    c.on('error', () => undefined);
    return c;
  };

  const listen = async (): Promise<void> => {
    const c = client();
    c.on('notification', (msg) => {
      if (msg.channel !== CHANNEL || msg.processId === (c as unknown as { processID: number }).processID) return;
      const change = parseChange(msg.payload);
      if (change) emit(change);
    });
    c.on('end', () => {
      if (listener === c) listener = undefined;
    });
    try {
      await c.connect();
      await c.query(`LISTEN ${CHANNEL}`);
    } catch (err) {
      await c.end().catch(() => undefined);
      throw err;
    }
    if (closed) return void (await c.end().catch(() => undefined));
    listener = c;
    // While nobody listened, other replicas' writes went unheard: act as if everything changed.
    emit({ kind: 'all', id: 0 });
    if (missed) {
      missed = false;
      await c.query('SELECT pg_notify($1, $2)', [CHANNEL, 'all:0']);
    }
  };
  const ensureListening = () => {
    if (closed || listener || listening) return;
    listening = listen().catch((err) => logger.warn({ err }, 'replica change listener could not connect')).finally(() => {
      listening = undefined;
    });
  };

  const dropLease = (c: pg.Client | undefined) => {
    if (c && leaseClient === c) {
      leaseClient = undefined;
      if (held) logger.warn('lease for background work lost');
      held = false;
    }
    void c?.end().catch(() => undefined);
  };
  const tryLease = async () => {
    if (closed || trying) return;
    trying = true;
    try {
      if (!leaseClient) {
        const c = client();
        c.on('end', () => dropLease(c));
        leaseClient = c;
        await c.connect();
        if (closed) return dropLease(c);
      }
      const c = leaseClient;
      if (!c) return;
      if (held) {
        await c.query('SELECT 1'); // the session (and with it the lock) is still there
      } else if ((await c.query('SELECT pg_try_advisory_lock($1) AS ok', [LEASE_LOCK])).rows[0]?.ok === true) {
        held = !closed;
        if (held) logger.info('lease for background work taken');
      }
    } catch (err) {
      logger.warn({ err }, 'lease session failed');
      dropLease(leaseClient);
    } finally {
      trying = false;
    }
  };

  const tick = () => {
    ensureListening();
    void tryLease();
  };
  const timer: Timer = clock.setInterval(tick, opts.tickMs ?? LEASE_TICK_MS);
  tick();

  // The beat comes first, so this replica is never among the dead its own sweep clears.
  let beating: Promise<void> | undefined;
  const heartbeat = () => {
    if (closed || beating) return;
    beating = (async () => {
      const now = clock.now();
      const known = await beats.beat(id, now);
      if (!known && beaten) {
        logger.warn('this replica was taken for dead (its heartbeat was late); recording its streams again');
        for (const fn of revived) fn();
      }
      beaten = true;
      const cleared = await beats.sweep(now - deadAfter);
      if (cleared > 0) logger.info({ hosts: cleared }, 'hosts of replicas without a heartbeat marked disconnected');
    })().catch((err) => logger.warn({ err }, 'replica heartbeat failed')).finally(() => {
      beating = undefined;
    });
  };
  const heartbeatTimer: Timer = clock.setInterval(heartbeat, opts.heartbeatMs ?? HEARTBEAT_MS);
  heartbeat();

  // A write published while the listener is down becomes `all` once it is back; a removal
  // missed so is found by every replica's periodic re-check of its open streams.
  const notify = (payload: string) => {
    const c = listener;
    if (!c) {
      missed = true;
      return;
    }
    c.query('SELECT pg_notify($1, $2)', [CHANNEL, payload]).catch((err) => {
      missed = true;
      logger.warn({ err }, 'replica change notification failed');
    });
  };

  return {
    id,
    publish(kind: Exclude<ChangeKind, 'removed'>, id = 0) {
      notify(`${kind}:${id}`);
    },
    publishRemoval(role, hostId) {
      notify(removalPayload(role, hostId));
    },
    onChange(fn) {
      handlers.push(fn);
    },
    onRevived(fn) {
      revived.push(fn);
    },
    leaseHeld: () => held,
    async close() {
      closed = true;
      timer.cancel();
      heartbeatTimer.cancel();
      await beating;
      held = false;
      const l = listener;
      const lc = leaseClient;
      listener = undefined;
      leaseClient = undefined;
      // Ending the session releases the advisory lock; the next replica's tick takes it.
      await Promise.all([l?.end().catch(() => undefined), lc?.end().catch(() => undefined)]);
    },
  };
}
